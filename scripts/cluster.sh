#!/usr/bin/env bash
# A local 3-node ringlimit cluster on 127.0.0.1, in the foreground
# (`make cluster`). Ctrl-C (SIGINT), SIGTERM and SIGHUP (the terminal
# closed) stop every node gracefully: hand-off, then leave.
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
#
# Environment (the defaults are the table above):
#   CLUSTER_HOST       address every port binds (127.0.0.1)
#   CLUSTER_BASE_PORT  node-1's gossip port (7946); node-N uses base+10(N-1)..+2
#   CLUSTER_BIN        the binary to run (bin/ringlimit, built when missing or
#                      older than a Go source)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${CLUSTER_BIN:-bin/ringlimit}
HOST=${CLUSTER_HOST:-127.0.0.1}
BASE=${CLUSTER_BASE_PORT:-7946}

if [ -z "${CLUSTER_BIN:-}" ] && { [ ! -x "$BIN" ] || [ -n "$(find . -name '*.go' -newer "$BIN" -print -quit)" ]; }; then
  echo "cluster: building $BIN" >&2
  go build -o "$BIN" ./cmd/node
fi

# say writes to stderr, and never fails: after SIGHUP the terminal is
# gone, and a failed echo must not stop the script (set -e) before it has
# stopped its nodes.
say() { echo "cluster: $*" >&2 2>/dev/null || true; }

pids=()
signalled=0 # pids[signalled..] have been sent SIGTERM
hurry=0
# Stop the nodes one at a time, newest first, so each hands its keys off to
# nodes still running; each gets at most its --shutdown-timeout. A second
# signal while stopping sends SIGTERM to all the remaining nodes at once
# (still a graceful stop: a node killed twice would skip its hand-off).
# (The nodes run in their own sessions, so Ctrl-C reaches this script and
# the log prefixers only, never the nodes themselves.)
stop_all() {
  set +e
  trap 'hurry=1' INT TERM HUP
  signalled=${#pids[@]}
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    if [ "$signalled" -gt "$i" ]; then
      kill -TERM "${pids[i]}" 2>/dev/null
      signalled=$i
    fi
    # wait returns early when a trapped signal arrives; wait again until
    # the node has exited.
    while kill -0 "${pids[i]}" 2>/dev/null; do
      if [ "$hurry" = 1 ] && [ "$signalled" -gt 0 ]; then
        say "stopping the other ${signalled} nodes at once"
        kill -TERM "${pids[@]:0:signalled}" 2>/dev/null
        signalled=0
      fi
      wait "${pids[i]}" 2>/dev/null
    done
  done
  # Reap the prefixers' exit (each ends when its node's output closes).
  wait 2>/dev/null
}
stop() {
  say "stopping ${#pids[@]} nodes"
  stop_all
  exit 0
}
trap stop INT TERM HUP

start() { # NAME BASEPORT [JOIN] [ARGS...]
  local name=$1 base=$2 join=${3:-}
  # Output is prefixed with the node's name by a sed that ignores INT,
  # TERM and HUP: it sits in the terminal's foreground process group, so
  # Ctrl-C reaches it, and it must live until its node has logged the
  # last line of its shutdown (it ends when the node's output closes).
  # $! is the node itself, not the sed, because sed runs in a process
  # substitution (and setsid execs the node in place).
  setsid "$BIN" serve --name "$name" --profile local \
    --gossip-addr "$HOST:$base" --grpc-addr "$HOST:$((base + 1))" --http-addr "$HOST:$((base + 2))" \
    ${join:+--join "$join"} "${@:4}" \
    > >(trap '' INT TERM HUP; exec sed -u "s/^/[$name] /") 2>&1 &
  pids+=($!)
  say "$name pid $! gossip $HOST:$base grpc $HOST:$((base + 1)) http $HOST:$((base + 2))"
}

start node-1 "$BASE" "" "$@"
start node-2 "$((BASE + 10))" "$HOST:$BASE" "$@"
start node-3 "$((BASE + 20))" "$HOST:$BASE" "$@"
say "3 nodes starting; gRPC $HOST:$((BASE + 1)),$HOST:$((BASE + 11)),$HOST:$((BASE + 21)); Ctrl-C stops them"

# If any node exits on its own (a port in use...), stop the others too.
set +e
wait -n "${pids[@]}"
status=$?
say "a node exited (status $status); stopping the others"
stop_all
exit "$status"
