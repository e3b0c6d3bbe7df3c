#!/usr/bin/env bash
# The cluster benchmark of BENCHMARKS.md, in one run: a 3-node loopback
# fleet (bin/ringlimit serve x3) against Redis and a bare gRPC round trip,
# at concurrency 64 and 1, same load shape. Needs Redis at $REDIS
# (default 127.0.0.1:6379).
#
#   cmd/node/bench.sh [DURATION]     (default 10s per measurement)
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
  setsid bin/ringlimit serve --name "node-$i" --profile local \
    --gossip-addr "127.0.0.1:$base" --grpc-addr "127.0.0.1:$((base + 1))" --http-addr "127.0.0.1:$((base + 2))" \
    $join ${PPROF:+--pprof "127.0.0.1:$((base + 3))"} >"$dir/node-$i.log" 2>&1 &
  pids+=($!)
  S="${S:+$S,}127.0.0.1:$((base + 1))"
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((base + 2))/readyz" >/dev/null && break; sleep 0.1; done
done
run() { echo "\$ $*"; "$@"; }
shape=(--keys 10000 --limit 100/1s --duration "$D")
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
run bin/ringlimit members --server 127.0.0.1:27947
for c in 64 1; do
  run bin/ringlimit bench --server "$S" --route any --concurrency "$c" "${shape[@]}"
  run bin/ringlimit bench --server "$S" --route owner --concurrency "$c" "${shape[@]}"
  run bin/ringlimit bench --redis "$REDIS" --concurrency "$c" "${shape[@]}"
  run bin/ringlimit bench --server 127.0.0.1:27947 --mode grpc-ping --concurrency "$c" "${shape[@]}"
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
