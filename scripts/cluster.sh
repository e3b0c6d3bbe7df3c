#!/usr/bin/env bash
# A local 3-node ringlimit cluster on 127.0.0.1, in the foreground
# (`make cluster`). Ctrl-C stops every node gracefully (hand-off, leave).
#
#   node    gossip  gRPC   HTTP
#   node-1  7946    7947   7948   (the seed)
#   node-2  7956    7957   7958
#   node-3  7966    7967   7968
#
# Try it:  bin/ringlimit consume --server 127.0.0.1:7957 --limit 5/1m alice
#          bin/ringlimit members
#          curl -s localhost:7968/v1/members
# Extra arguments are passed to every node's `serve` (e.g. --log-level debug).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=bin/ringlimit

# Build when the binary is missing or older than any Go source.
if [ ! -x "$BIN" ] || [ -n "$(find . -name '*.go' -newer "$BIN" -print -quit)" ]; then
  echo "cluster: building $BIN" >&2
  go build -o "$BIN" ./cmd/node
fi

pids=()
# Stop the nodes one at a time, newest first, so each hands its keys off to
# nodes still running. (The nodes run in their own sessions, so Ctrl-C
# reaches this script only, not all of them at once.)
stop_all() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
}
stop() {
  trap - INT TERM
  echo "cluster: stopping ${#pids[@]} nodes" >&2
  stop_all
  exit 0
}
trap stop INT TERM

start() { # NAME BASEPORT [JOIN]
  local name=$1 base=$2 join=${3:-}
  # Output is prefixed with the node's name; $! is the node itself, not the
  # prefixing sed, because sed runs in a process substitution (and setsid
  # execs the node in place).
  setsid "$BIN" serve --name "$name" --profile local \
    --gossip-addr "127.0.0.1:$base" --grpc-addr "127.0.0.1:$((base + 1))" --http-addr "127.0.0.1:$((base + 2))" \
    ${join:+--join "$join"} "${@:4}" \
    > >(sed -u "s/^/[$name] /") 2>&1 &
  pids+=($!)
}

start node-1 7946 "" "$@"
start node-2 7956 127.0.0.1:7946 "$@"
start node-3 7966 127.0.0.1:7946 "$@"
echo "cluster: 3 nodes starting; gRPC 127.0.0.1:7947,127.0.0.1:7957,127.0.0.1:7967; Ctrl-C stops them" >&2

# If any node exits on its own (a port in use...), stop the others too.
set +e
wait -n "${pids[@]}"
status=$?
trap - INT TERM
echo "cluster: a node exited (status $status); stopping the others" >&2
stop_all
exit "$status"
