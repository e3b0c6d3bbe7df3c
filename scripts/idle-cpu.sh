#!/usr/bin/env bash
# Idle CPU of a 3-node loopback fleet: three `serve --profile local`, 5 s to settle, then
# utime+stime of the three processes over 10 s, in 10 ms ticks. Usage: scripts/idle-cpu.sh BINARY [serve flags...]
set -u
B=${1:?binary}; shift
pids=()
for i in 1 2 3; do base=$((29036 + 10*i)); join=""; [ $i -gt 1 ] && join="--join 127.0.0.1:29046"
$B serve --name n$i --profile local --gossip-addr 127.0.0.1:$base --grpc-addr 127.0.0.1:$((base+1)) --http-addr 127.0.0.1:$((base+2)) $join "$@" >/dev/null 2>&1 & pids+=($!); sleep 0.5; done
sleep 5
t0=0; for p in ${pids[@]}; do set -- $(cut -d' ' -f14,15 /proc/$p/stat); t0=$((t0+$1+$2)); done
sleep 10
t1=0; for p in ${pids[@]}; do set -- $(cut -d' ' -f14,15 /proc/$p/stat); t1=$((t1+$1+$2)); done
echo "idle ticks/10s (3 nodes, 100Hz): $((t1-t0))"
kill ${pids[@]}; wait 2>/dev/null
