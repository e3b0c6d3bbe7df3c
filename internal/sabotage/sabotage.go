package sabotage

import (
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Env is the environment variable that turns switches on (test-only).
const Env = "RINGLIMIT_SABOTAGE"

// The switches, each the one protection it turns off.
const (
	// HandOff: state no longer moves with a key whose owner changes. A
	// hand-off exports the keys the node no longer owns and drops them
	// instead of sending them, and a first-use fetch is answered with no
	// state (the holder still gives the key up). Checked by join, leave and
	// rolling-restart (with --replicas 0, so no replica stands in).
	HandOff = "handoff"
	// Forward: every node counts every key in its own engine, as if it
	// owned them all; nothing is forwarded. Checked by steady.
	Forward = "forward"
	// Majority: a node that sees no majority of the members it knows
	// routes by the ring of the live members it sees anyway (takes over
	// the keys of members it merely cannot reach). Checked by partition.
	Majority = "majority"
)

// The simulator's planted mutations (package sim; sim/MUTATIONS.md): each
// must be caught within 1,000 seeds.
const (
	// NoFetch: a new owner counts a moved key without fetching its state
	// from its previous owner or the replica holders (the first-use fetch
	// is skipped).
	NoFetch = "nofetch"
	// CountHandedOff: an old owner counts a forwarded call for a key it
	// handed off (or gave to a new owner on a fetch) instead of passing
	// it on.
	CountHandedOff = "counthandedoff"
	// DropReplica: replica shipments are dropped silently: the owner
	// believes its successors hold the state.
	DropReplica = "dropreplica"
	// LastHop: the last-hop guard of the rolling-restart fix is reverted:
	// a node counts a call's last hop for keys it handed to their owner.
	LastHop = "lasthop"
)

// Known lists every switch, for the warning and for the harness.
var Known = []string{HandOff, Forward, Majority, NoFetch, CountHandedOff, DropReplica, LastHop}

var (
	once sync.Once
	on   atomic.Pointer[[]string]
)

func load() {
	var names []string
	for _, s := range strings.Split(os.Getenv(Env), ",") {
		if s = strings.TrimSpace(s); s != "" {
			names = append(names, s)
		}
	}
	on.Store(&names)
}

// On reports whether switch name is on in this process.
func On(name string) bool {
	once.Do(load)
	return slices.Contains(*on.Load(), name)
}

// Active returns the switches named in the environment (unknown names
// included, so the start-up warning shows a typo too), or by Set.
func Active() []string {
	once.Do(load)
	return slices.Clone(*on.Load())
}

// Set turns exactly the named switches on in this process, in place of
// the environment's, and returns a function that puts the previous ones
// back. Test-only: the simulator's mutation test runs the same seeds with
// and without a switch in one process (its seeds must not run meanwhile
// with other switches).
func Set(names ...string) (restore func()) {
	once.Do(load)
	names = slices.Clone(names)
	prev := on.Swap(&names)
	return func() { on.Store(prev) }
}
