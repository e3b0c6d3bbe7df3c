#!/usr/bin/env bash
# Paired runs of two fleets, each against Redis through rueidis in the same run, driven by one
# bench client (leases off). Usage: scripts/paired-bench.sh OLD_BINARY NEW_BINARY (build each
# with go build -o; DUR sets each measurement, default 8s; ROUNDS the pairs, default 2). Needs redis-server on the PATH.
set -u
D=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf $D' EXIT
redis-server --port 27998 --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir $D --pidfile $D/r.pid --logfile $D/r.log
sleep 0.5; RPID=$(cat $D/r.pid)
OLD=${1:?old binary}; NEW=${2:?new binary}; B=$NEW
DUR=${DUR:-8s}
fleet() { # $1 binary, $2 label
  local pids=() S="" N=""
  for i in 1 2 3; do
    base=$((28136 + 10 * i)); join=""; [ "$i" -gt 1 ] && join="--join 127.0.0.1:28146"
    $1 serve --name "node-$i" --profile local --gossip-addr 127.0.0.1:$base --grpc-addr 127.0.0.1:$((base+1)) --http-addr 127.0.0.1:$((base+2)) $join >$D/$2-$i.log 2>&1 &
    pids+=($!); N="${N:+$N,}$!"; S="${S:+$S,}127.0.0.1:$((base+1))"
    for _ in $(seq 100); do curl -sf http://127.0.0.1:$((base+2))/readyz >/dev/null && break; sleep 0.1; done
  done
  sleep 1
  $B bench --server $S --leases=false --keys 10000 --limit 100/1s --concurrency 64 --duration 12s --seed 1 >/dev/null 2>&1 # warm up past FetchWindow
  $B bench --server $S --leases=false --keys 10000 --limit 100/1s --concurrency 64 --duration $DUR --seed 2 --server-pids $N 2>/dev/null | tail -1 > $D/$2.json
  for p in "${pids[@]}"; do kill -TERM $p; done; wait "${pids[@]}" 2>/dev/null
  echo "$2 $(cat $D/$2.json)"
}
redisrun() {
  $B bench --redis 127.0.0.1:27998 --redis-client rueidis --keys 10000 --limit 100/1s --concurrency 64 --duration $DUR --seed 3 --server-pids $RPID 2>/dev/null | tail -1
}
for round in $(seq ${ROUNDS:-2}); do
  fleet "$OLD" old$round; echo "redis $(redisrun)"
  fleet "$NEW" new$round; echo "redis $(redisrun)"
done
redis-cli -p 27998 shutdown nosave >/dev/null 2>&1
