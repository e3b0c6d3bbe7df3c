#!/usr/bin/env bash
# The cluster benchmark of BENCHMARKS.md, in one run: a 3-node loopback
# fleet (bin/ringlimit serve x3) against Redis and a bare gRPC round trip,
# at concurrency 64 and 1, same load shape (and, at 64, the fleet answering
# the same calls as peeks: its ceiling, without recording or replication). Needs Redis at $REDIS
# (default 127.0.0.1:6379).
#
#   cmd/node/bench.sh [DURATION]     (default 10s per measurement)
#
# PERF=1 adds one more fleet run at concurrency 64 under `perf stat -a`
# (apt-get install linux-perf) and prints the machine's context switches
# and read, write and futex system calls per decision.
#
# NODE_GOMAXPROCS=N runs the nodes (only) with GOMAXPROCS=N, as a node in
# a container with an N-CPU limit runs (Go sets it from the limit): three
# nodes and the load generator on two cores otherwise run eight Ps.
# REPLICAS=N passes --replicas N to the nodes (default 1; 0 turns
# replication off).
#
# At the end, a Zipf 1.1 load at concurrency 64: the fleet client with its
# refusal cache, without it, and Redis.
#
# Prints each command, then its one-line JSON result.
set -euo pipefail
cd "$(dirname "$0")/../.."
D=${1:-10s}
REDIS=${REDIS:-127.0.0.1:6379}
go build -o bin/ringlimit ./cmd/node
dir=$(mktemp -d)
pids=()
cleanup() {
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; wait "${pids[i]}" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
S=""
for i in 1 2 3; do
  base=$((27936 + 10 * i))
  join=""; [ "$i" -gt 1 ] && join="--join 127.0.0.1:27946"
  ${NODE_GOMAXPROCS:+env GOMAXPROCS=$NODE_GOMAXPROCS} setsid bin/ringlimit serve --name "node-$i" --profile local --replicas "${REPLICAS:-1}" \
    --gossip-addr "127.0.0.1:$base" --grpc-addr "127.0.0.1:$((base + 1))" --http-addr "127.0.0.1:$((base + 2))" \
    $join ${PPROF:+--pprof "127.0.0.1:$((base + 3))"} >"$dir/node-$i.log" 2>&1 &
  pids+=($!)
  S="${S:+$S,}127.0.0.1:$((base + 1))"
  ready=""
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((base + 2))/readyz" >/dev/null && { ready=1; break; }; sleep 0.1; done
  [ -n "$ready" ] || { echo "bench.sh: node-$i not ready after 10 s (a port in use?); its log:" >&2; cat "$dir/node-$i.log" >&2; exit 1; }
done
# Measure the steady state: for FetchWindow (10 s) after a ring change a
# node's first use of each key it newly owns fetches the key's state from
# the previous owner, one round trip per key; with 10,000 fresh keys that
# transient would dominate a 10 s run. WARMUP=0 measures it instead.
sleep "${WARMUP:-11}"
run() { echo "\$ $*"; "$@"; }
shape=(--keys 10000 --limit 100/1s --duration "$D")
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); nodes: GOMAXPROCS=${NODE_GOMAXPROCS:-default} --replicas ${REPLICAS:-1}"
run bin/ringlimit members --server 127.0.0.1:27947
for c in 64 1; do
  run bin/ringlimit bench --server "$S" --route any --concurrency "$c" "${shape[@]}"
  run bin/ringlimit bench --server "$S" --route owner --concurrency "$c" "${shape[@]}"
  # The fleet's ceiling for this load: the same calls as peeks (nothing
  # recorded, nothing replicated), all transport and routing.
  [ "$c" = 64 ] && run bin/ringlimit bench --server "$S" --route owner --peek --concurrency "$c" "${shape[@]}"
  run bin/ringlimit bench --redis "$REDIS" --concurrency "$c" "${shape[@]}"
  run bin/ringlimit bench --server 127.0.0.1:27947 --mode grpc-ping --concurrency "$c" "${shape[@]}"
done
# Hot refused keys (Zipf 1.1: about half of the calls are refusals of a
# few keys): the fleet client's refusal cache on and off, and Redis.
zipf=(--keys 10000 --zipf 1.1 --limit 100/1s --duration "$D" --concurrency 64 --seed 11)
run bin/ringlimit bench --server "$S" --route owner "${zipf[@]}"
run bin/ringlimit bench --server "$S" --route owner --client-refusal-cache=false "${zipf[@]}"
run bin/ringlimit bench --redis "$REDIS" "${zipf[@]}"
if [ -n "${PERF:-}" ]; then
  echo "\$ perf stat -a ... bin/ringlimit bench --server $S --route owner --concurrency 64 ${shape[*]}"
  perf stat -a -x, -o "$dir/perf.txt" -e context-switches,syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_futex -- \
    bin/ringlimit bench --server "$S" --route owner --concurrency 64 "${shape[@]}" | tee "$dir/perf.json"
  ops=$(grep -o '"ops":[0-9]*' "$dir/perf.json" | cut -d: -f2)
  awk -F, -v ops="$ops" '$3 != "" && $1 ~ /^[0-9]/ {printf "# %s per decision: %.2f\n", $3, $1 / ops}' "$dir/perf.txt"
fi
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
