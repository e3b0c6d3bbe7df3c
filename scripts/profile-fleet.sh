#!/usr/bin/env bash
# CPU profiles of a 3-node loopback fleet under bench load (issue 20):
#   scripts/profile-fleet.sh            c=64 sliding log 100/1s, owner routing, 20 s run, 14 s profiles
# LIMIT, ROUTE (owner|any), C (concurrency), OUT (default /tmp/prof/out), PORT0 (default 28036:
# node i uses PORT0+10i .. +3) and REPO (default: this checkout) change it. Read the result with
#   go tool pprof -top bin/ringlimit $OUT/node-*.pprof
set -euo pipefail
cd "${REPO:-$(dirname "$0")/..}"
go build -o bin/ringlimit ./cmd/node
LIMIT=${LIMIT:-100/1s}
ROUTE=${ROUTE:-owner}
out=${OUT:-/tmp/prof/out}
mkdir -p $out
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM $p 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
S=""; NPIDS=""
for i in 1 2 3; do
  base=$((${PORT0:-28036} + 10 * i))
  join=""; [ "$i" -gt 1 ] && join="--join 127.0.0.1:$((${PORT0:-28036}+10))"
  bin/ringlimit serve --name "node-$i" --profile local --gossip-addr "127.0.0.1:$base" --grpc-addr "127.0.0.1:$((base + 1))" --http-addr "127.0.0.1:$((base + 2))" $join --pprof "127.0.0.1:$((base + 3))" >$out/node-$i.log 2>&1 &
  pids+=($!); NPIDS="${NPIDS:+$NPIDS,}$!"; S="${S:+$S,}127.0.0.1:$((base + 1))"
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((base + 2))/readyz" >/dev/null && break; sleep 0.1; done
done
sleep 11
bin/ringlimit bench --server "$S" --server-pids "$NPIDS" --route $ROUTE --concurrency ${C:-64} --keys 10000 --duration 20s --limit $LIMIT > $out/bench.json &
bp=$!
sleep 3
cp=()
for i in 1 2 3; do curl -s "http://127.0.0.1:$((${PORT0:-28036} + 10*i + 3))/debug/pprof/profile?seconds=14" > $out/node-$i.pprof & cp+=($!); done
wait $bp
wait "${cp[@]}"
cat $out/bench.json
