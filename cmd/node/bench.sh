#!/usr/bin/env bash
# The cluster benchmark of BENCHMARKS.md (issue 20), in one run: a 3-node
# loopback fleet (bin/ringlimit serve x3, --profile local, the default one
# replica) against a private redis-server driven through rueidis (and
# go-redis), and a bare gRPC unary call, same load shape: 10,000 uniform
# keys, 100/1s. At the end it prints every target of issue 20 as a ratio
# between runs of this one script.
#
#   cmd/node/bench.sh [DURATION]     (default 10s per measurement)
#
# The CPU per decision of the servers (the three nodes' processes, or
# redis-server) is read from /proc/PID/stat before and after each run
# (bench --server-pids); the bench process's own is client_cpu_us_per_op.
# A private redis-server (port 27999, no persistence) is started when
# redis-server is on the PATH, so its CPU is the benchmark's alone;
# otherwise $REDIS (default 127.0.0.1:6379) is used and its CPU is not
# reported.
#
# EMBEDDED=0 skips BenchmarkEmbedded (go test, the root package: embedded
# nodes against the fleet client, CPU per decision in one process);
# MEMORY=0 skips limiter's BenchmarkBytesPerKey and
# BenchmarkSlidingLogBytesPerUse. EXTRA=1 adds a Zipf 1.1 load (refusal
# cache on and off). Peeks at concurrency 64 and 1 always run: the same
# calls over the same client, streams and routing, recording nothing and
# replicating nothing, so each gives targets 1-3 a floor, the same ratio
# for a strict part of a decision's work: a target its floor misses is out
# of reach of any change to the decision or to replication while the
# transport stays as it is. PPROF=1 serves the nodes'
# pprof on base port + 3 (node-1: 127.0.0.1:27949).
# NODE_GOMAXPROCS=N runs the nodes with GOMAXPROCS=N; REPLICAS=N passes
# --replicas N (default 1; anything else is not a headline run).
#
# Prints each command, then its one-line JSON result, then the targets.
set -euo pipefail
cd "$(dirname "$0")/../.."
D=${1:-10s}
go build -o bin/ringlimit ./cmd/node
dir=$(mktemp -d)
pids=()
cleanup() {
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; wait "${pids[i]}" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
if command -v redis-server >/dev/null; then
  redis-server --port 27999 --bind 127.0.0.1 --save '' --appendonly no >"$dir/redis.log" 2>&1 &
  pids+=($!)
  REDIS=127.0.0.1:27999
  RPID=$!
  for _ in $(seq 50); do redis-cli -p 27999 ping >/dev/null 2>&1 && break; sleep 0.1; done
  kill -0 "$RPID" 2>/dev/null && redis-cli -p 27999 ping >/dev/null || { echo "bench.sh: redis-server on 127.0.0.1:27999 did not start (port in use?); its log:" >&2; cat "$dir/redis.log" >&2; exit 1; }
else
  REDIS=${REDIS:-127.0.0.1:6379}
  RPID=""
  echo "# no redis-server on the PATH: Redis at $REDIS, its CPU not measured" >&2
fi
S=""
NPIDS=""
for i in 1 2 3; do
  base=$((27936 + 10 * i))
  join=""; [ "$i" -gt 1 ] && join="--join 127.0.0.1:27946"
  ${NODE_GOMAXPROCS:+env GOMAXPROCS=$NODE_GOMAXPROCS} bin/ringlimit serve --name "node-$i" --profile local --replicas "${REPLICAS:-1}" \
    --gossip-addr "127.0.0.1:$base" --grpc-addr "127.0.0.1:$((base + 1))" --http-addr "127.0.0.1:$((base + 2))" \
    $join ${PPROF:+--pprof "127.0.0.1:$((base + 3))"} >"$dir/node-$i.log" 2>&1 &
  pids+=($!)
  NPIDS="${NPIDS:+$NPIDS,}$!"
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
# run NAME CMD...: prints the command and its JSON, and keeps the JSON as NAME.
run() { local name=$1; shift; echo "\$ $*"; "$@" | tee "$dir/$name.json"; }
shape=(--keys 10000 --duration "$D")
sl=(--limit 100/1s)
tb=(--limit token-bucket:100/1s)
fleet=(bin/ringlimit bench --server "$S" --server-pids "$NPIDS")
redis=(bin/ringlimit bench --redis "$REDIS" ${RPID:+--server-pids "$RPID"})
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); nodes: GOMAXPROCS=${NODE_GOMAXPROCS:-default} --replicas ${REPLICAS:-1}; commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +dirty)"
bin/ringlimit members --server 127.0.0.1:27947 >/dev/null
run sl64 "${fleet[@]}" --route owner --concurrency 64 "${shape[@]}" "${sl[@]}"
run rsl64 "${redis[@]}" --redis-client rueidis --concurrency 64 "${shape[@]}" "${sl[@]}"
run any64 "${fleet[@]}" --route any --concurrency 64 "${shape[@]}" "${sl[@]}"
run tb64 "${fleet[@]}" --route owner --concurrency 64 "${shape[@]}" "${tb[@]}"
run rtb64 "${redis[@]}" --redis-client rueidis --concurrency 64 "${shape[@]}" "${tb[@]}"
run gsl64 "${redis[@]}" --redis-client go-redis --concurrency 64 "${shape[@]}" "${sl[@]}"
run sl1 "${fleet[@]}" --route owner --concurrency 1 "${shape[@]}" "${sl[@]}"
run rsl1 "${redis[@]}" --redis-client rueidis --concurrency 1 "${shape[@]}" "${sl[@]}"
run ping1 bin/ringlimit bench --server 127.0.0.1:27947 --server-pids "${NPIDS%%,*}" --mode grpc-ping --concurrency 1 "${shape[@]}"
run peek64 "${fleet[@]}" --route owner --peek --concurrency 64 "${shape[@]}" "${sl[@]}"
run peek1 "${fleet[@]}" --route owner --peek --concurrency 1 "${shape[@]}" "${sl[@]}"
if [ -n "${EXTRA:-}" ]; then
  zipf=(--keys 10000 --zipf 1.1 --limit 100/1s --duration "$D" --concurrency 64 --seed 11)
  run zipf "${fleet[@]}" --route owner "${zipf[@]}"
  run zipfnc "${fleet[@]}" --route owner --client-refusal-cache=false "${zipf[@]}"
  run rzipf "${redis[@]}" "${zipf[@]}"
fi
echo "# load after the cluster runs: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; wait "${pids[i]}" 2>/dev/null || true; done
pids=()
if [ "${EMBEDDED:-1}" != 0 ]; then
  echo "\$ go test -run '^\$' -bench 'BenchmarkEmbedded\$' -benchtime 5s ."
  go test -run '^$' -bench 'BenchmarkEmbedded$' -benchtime 5s . | tee "$dir/embedded.txt" || echo "# BenchmarkEmbedded failed (above): target 4 not measured in this run"
fi
if [ "${MEMORY:-1}" != 0 ]; then
  echo "\$ go test -run '^\$' -bench 'BenchmarkBytesPerKey|BenchmarkSlidingLogBytesPerUse' -benchtime 1x ./limiter/"
  go test -run '^$' -bench 'BenchmarkBytesPerKey|BenchmarkSlidingLogBytesPerUse' -benchtime 1x ./limiter/ | tee "$dir/memory.txt" || echo "# the memory benchmarks failed (above)"
fi

# The targets, each a ratio between runs above.
j() { jq -r "$2" "$dir/$1.json"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
line() { # NAME VALUE OP BOUND [MET MISSED]: the words of the verdict
  local verdict=${6:-missed}
  if [ "$2" != n/a ] && awk -v v="$2" -v b="$4" -v op="$3" 'BEGIN { exit !((op == "<=" && v <= b) || (op == ">=" && v >= b) || (op == "==" && v == b)) }'; then verdict=${5:-met}; fi
  printf '%-72s %8s  (target %s %s: %s)\n' "$1" "$2" "$3" "$4" "$verdict"
}
echo "# targets of issue 20 (a = this fleet, b = the baseline of the same run)"
line "1. c=64 sliding log: node CPU/decision / redis-server's" "$(ratio "$(j sl64 .server_cpu_us_per_op)" "$(j rsl64 .server_cpu_us_per_op)")" "<=" 0.5
line "2. c=64 sliding log: fleet decisions/s / Redis+rueidis's" "$(ratio "$(j sl64 .ops_per_sec)" "$(j rsl64 .ops_per_sec)")" ">=" 2
line "2. c=64 token bucket: fleet decisions/s / Redis+rueidis's" "$(ratio "$(j tb64 .ops_per_sec)" "$(j rtb64 .ops_per_sec)")" ">=" 2
line "2. c=64 sliding log: fleet p99 / Redis+rueidis's" "$(ratio "$(j sl64 .p99_us)" "$(j rsl64 .p99_us)")" "<=" 1
line "2. c=64 token bucket: fleet p99 / Redis+rueidis's" "$(ratio "$(j tb64 .p99_us)" "$(j rtb64 .p99_us)")" "<=" 1
line "2. c=64 sliding log: fleet over-admission (most beyond the limit)" "$(j sl64 .max_overadmit)" "==" 0
line "3. c=1 sliding log: fleet p50 / Redis+rueidis's" "$(ratio "$(j sl1 .p50_us)" "$(j rsl1 .p50_us)")" "<=" 1
line "3. c=1 sliding log: node CPU/decision / redis-server's" "$(ratio "$(j sl1 .server_cpu_us_per_op)" "$(j rsl1 .server_cpu_us_per_op)")" "<=" 1.5
line "3. c=1 sliding log: fleet p99 / a bare gRPC unary call's" "$(ratio "$(j sl1 .p99_us)" "$(j ping1 .p99_us)")" "<=" 2
if [ -f "$dir/embedded.txt" ]; then
  emb=$(awk '/^BenchmarkEmbedded\/embedded/ { for (i = 1; i < NF; i++) if ($(i+1) == "cpu-ns/op") print $i }' "$dir/embedded.txt")
  flc=$(awk '/^BenchmarkEmbedded\/fleet-client/ { for (i = 1; i < NF; i++) if ($(i+1) == "cpu-ns/op") print $i }' "$dir/embedded.txt")
  line "4. embedded nodes: CPU/decision / the fleet client's (one process)" "$(ratio "$emb" "$flc")" "<=" 1
fi
line "5. c=64 sliding log: --route any decisions/s / owner routing's" "$(ratio "$(j any64 .ops_per_sec)" "$(j sl64 .ops_per_sec)")" ">=" 0.8
if [ -f "$dir/memory.txt" ]; then
  for a in token-bucket sliding-window; do
    line "6. bytes per $a key at 1M keys" "$(awk -v a="BenchmarkBytesPerKey/$a" 'index($1, a) == 1 { for (i = 1; i < NF; i++) if ($(i+1) == "B/key") print $i }' "$dir/memory.txt")" "<=" 128
  done
  printf '%-72s %8s  (reported)\n' "6. sliding log: bytes per recorded use" "$(awk '/^BenchmarkSlidingLogBytesPerUse/ { for (i = 1; i < NF; i++) if ($(i+1) == "B/use") print $i }' "$dir/memory.txt")"
fi
# floor NAME VALUE OP BOUND: the same ratio for work that cannot cost
# more than the target's; when it misses the bound, so must the target.
floor() { line "$@" "within the floor" "the floor misses it: out of reach with this transport"; }
echo "# floors of targets 1-3 in the same run: the same calls as peeks (nothing recorded, nothing replicated)"
floor "1. floor: c=64 peek: node CPU/decision / redis-server's (sliding log)" "$(ratio "$(j peek64 .server_cpu_us_per_op)" "$(j rsl64 .server_cpu_us_per_op)")" "<=" 0.5
floor "2. floor: c=64 peek: fleet decisions/s / Redis+rueidis's (sliding log)" "$(ratio "$(j peek64 .ops_per_sec)" "$(j rsl64 .ops_per_sec)")" ">=" 2
floor "3. floor: c=1 peek: fleet p50 / Redis+rueidis's (sliding log)" "$(ratio "$(j peek1 .p50_us)" "$(j rsl1 .p50_us)")" "<=" 1
floor "3. floor: c=1 peek: node CPU/decision / redis-server's (sliding log)" "$(ratio "$(j peek1 .server_cpu_us_per_op)" "$(j rsl1 .server_cpu_us_per_op)")" "<=" 1.5
echo "# figures: c=64 sliding log node $(j sl64 .server_cpu_us_per_op) µs/decision, redis-server $(j rsl64 .server_cpu_us_per_op), peek node $(j peek64 .server_cpu_us_per_op), go-redis run's redis-server $(j gsl64 .server_cpu_us_per_op); c=1 node $(j sl1 .server_cpu_us_per_op), redis-server $(j rsl1 .server_cpu_us_per_op), peek node $(j peek1 .server_cpu_us_per_op), bare gRPC call $(j ping1 .server_cpu_us_per_op)"
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
