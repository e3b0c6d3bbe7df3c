package chaos

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestChaosShort runs short kill-owner and partition scenarios on real
// node processes built from ./cmd/node. It fails (never skips) when the
// binary cannot be built or a promise is broken, printing the scenario's
// table and the tails of the node logs. -short runs it too: it is the
// chaos suite's share of make test.
func TestChaosShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var log strings.Builder
	r, err := NewRunner(ctx, Options{
		Nodes: 5, Duration: 10 * time.Second, Workers: 16, Pace: 10 * time.Millisecond,
		Binary: os.Getenv("RINGLIMIT_CHAOS_BIN"), Log: &log,
	})
	if err != nil {
		t.Fatalf("chaos runner: %v", err)
	}
	failed := false
	t.Cleanup(func() { r.Close(failed) })
	for _, name := range []string{"kill-owner", "partition"} {
		t.Run(name, func(t *testing.T) {
			sc, _ := Lookup(name)
			res, err := r.Run(ctx, sc)
			var out strings.Builder
			if res != nil {
				Print(&out, res)
			}
			passed := err == nil && res.Passed
			if !passed {
				failed = true
				t.Fatalf("%s: err %v\nprogress:\n%s%s", name, err, log.String(), out.String())
			}
			t.Log(out.String())
		})
	}
}
