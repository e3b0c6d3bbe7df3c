// Package chaos is ringlimit's chaos suite: it builds the ringlimit binary
// (./cmd/node), starts a cluster of real node processes on loopback, drives
// load through every node, injects faults on a schedule, records every call,
// and judges the history against the promises the cluster makes.
//
// # Harness
//
// Each node gets its own loopback address (127.77.<run>.<slot+2>), free
// ports, the local gossip profile, and, when the harness runs as root, its
// own user id. The user id is what makes partitions possible on one host: a
// node's outgoing TCP connections leave from 127.0.0.1 whatever it binds, so
// an nftables rule (in a table of the run's own, inet ringlimit_chaos_<pid>,
// deleted on heal, at the end of every scenario and by the next run if a
// run died) drops packets by the sending socket's user and the destination
// address: node X's packets to the other nodes' addresses, and the other
// nodes' packets to X's address. The harness's clients run as root and
// reach every node throughout. Nodes get SIGKILL if the harness dies.
//
// Load: Options.Workers clients, each sending sliding-log calls (default 20
// per 2 s) to its own node (the next usable one while its node is down),
// pausing Options.Pace between calls; half the calls go to 8 hot keys, half
// to 300 cold ones. Every call carries the deadline Timeout + 100 ms.
//
// Faults: SIGKILL of the hottest key's owner and its restart (same name and
// ports), SIGSTOP/SIGCONT for 5 s, graceful leave (SIGTERM), a rolling
// restart, a node joining under load, and the isolation of one node. Before
// a SIGKILL the harness fills crash keys the victim owns to their limit
// (Options.CrashKeys, a window of Options.CrashWindow, longer than the
// kill's convergence) and keeps calling them through the survivors after
// it: a crash can only lose what is still inside a window when the
// survivors take over, and the load's hot keys, admitted in one burst per
// window, seldom are. Leave does the same with the leaving owner's keys,
// which its hand-off must carry whole.
//
// # Sabotage
//
// Every scenario names the protection its promise checks and the test-only
// switch that turns it off (Scenario.Sabotage: --replicas 0, the nodes'
// --timeout, or RINGLIMIT_SABOTAGE read by internal/sabotage). Its
// Sabotaged run passes only when the check broke: a check that cannot tell
// the protection on from off is a defect. kill-owner-no-replicas is
// kill-owner sabotaged, and runs in "all" and in TestChaosShort.
//
// # Checker
//
// Check, CheckOvershoot, CheckConvergence and CheckProbe judge a history;
// see each for the exact rule. In short: a call is unanswered when it got no
// verdict within the deadline; calls to a node while it was killed, stopped
// or shutting down are excused (counted apart); an overshoot is a set of
// more than Uses admissions of one key whose [Start, End] intervals all lie
// inside one Window (so a correct limiter could never have admitted them
// all, wherever its decisions fell inside the intervals); convergence is
// the time from a fault until every surviving node has answered a moved key
// after its Owner answer changed; the probe, a window after the load
// stopped, sends Uses+1 calls per key and wants exactly Uses admitted.
//
// Each call records whether the node's failure policy decided it (the
// ringlimit-fallback header): exactness is the owners' promise, and an
// admission the local fallback made is held to that node's share of the
// limit instead; the probe asks again about a key whose calls met the
// fallback. A late call is counted apart when the harness was not running
// during it, or when its node's own stalls (serve --log-stalls) cover the
// node's margin beyond Timeout plus the call's lateness.
//
// # Running
//
//	go run ./chaos/cmd/chaos -scenario all -nodes 5             # make chaos
//	go run ./chaos/cmd/chaos -scenario all -nodes 5 -sabotage   # make chaos-sabotage
//	go test ./chaos/...        # short kill-owner, kill-owner-no-replicas, partition
//
// The test builds ./cmd/node and fails with the build error when it cannot;
// RINGLIMIT_CHAOS_BIN names a prebuilt binary instead. Partitions need root
// and nft (apt-get install -y nftables). A run that passes removes its
// temporary work directory (ringlimit-chaos-*); one that fails keeps it
// (node logs, history.csv, crash-keys.csv) and prints where it is.
package chaos
