package sabotage

import (
	"os"
	"slices"
	"strings"
	"sync"
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

// Known lists every switch, for the warning and for the harness.
var Known = []string{HandOff, Forward, Majority}

var (
	once sync.Once
	on   []string
)

func load() {
	for _, s := range strings.Split(os.Getenv(Env), ",") {
		if s = strings.TrimSpace(s); s != "" {
			on = append(on, s)
		}
	}
}

// On reports whether switch name is on in this process.
func On(name string) bool {
	once.Do(load)
	return slices.Contains(on, name)
}

// Active returns the switches named in the environment (unknown names
// included, so the start-up warning shows a typo too).
func Active() []string {
	once.Do(load)
	return slices.Clone(on)
}
