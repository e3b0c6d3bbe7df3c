#!/usr/bin/env bash
# c=1 paired: each fleet (3 nodes, --profile local) started afresh, 11 s past the fetch window,
# then one c=1 bench of 8 s with the nodes' CPU; OLD then NEW, twice. Usage: scripts/paired-c1.sh OLD_BINARY NEW_BINARY
set -u
fleet() {
  local pids=() S="" N=""
  for i in 1 2 3; do base=$((29136 + 10*i)); join=""; [ $i -gt 1 ] && join="--join 127.0.0.1:29146"
    $1 serve --name n$i --profile local --gossip-addr 127.0.0.1:$base --grpc-addr 127.0.0.1:$((base+1)) --http-addr 127.0.0.1:$((base+2)) $join >/dev/null 2>&1 &
    pids+=($!); N="${N:+$N,}$!"; S="${S:+$S,}127.0.0.1:$((base+1))"
    for _ in $(seq 100); do curl -sf http://127.0.0.1:$((base+2))/readyz >/dev/null && break; sleep 0.1; done
  done
  sleep 11
  $2 bench --server $S --keys 10000 --limit 100/1s --concurrency 1 --duration 8s --server-pids $N 2>/dev/null | tail -1 | python3 -c "import sys,json; d=json.load(sys.stdin); print('$3', 'ops/s', d['ops_per_sec'], 'p50', d['p50_us'], 'p99', d['p99_us'], 'server_cpu_us', d['server_cpu_us_per_op'], 'client_cpu_us', d['client_cpu_us_per_op'])"
  kill ${pids[@]}; wait ${pids[@]} 2>/dev/null
}
for r in 1 2; do fleet $1 $2 old$r; fleet $2 $2 new$r; done
