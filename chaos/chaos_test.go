package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestChaosShort runs short kill-owner, kill-owner-no-replicas and
// partition scenarios on real node processes built from ./cmd/node. It
// fails (never skips) when the binary cannot be built, a promise is broken,
// or the contrast run does not break: kill-owner-no-replicas kills the
// owner of crash keys filled just before the kill, with replication off,
// and its crash-keys check must find uses over the limit — else the check
// cannot tell replication on from off. It prints the scenario's table and
// the tails of the node logs, and keeps the work directory (printed) when
// it fails. -short runs it too: it is the chaos suite's share of make test.
func TestChaosShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
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
	t.Cleanup(func() {
		if kept := r.Close(failed); kept != "" && failed {
			t.Logf("chaos: work dir kept (node logs, history.csv): %s", kept)
		}
	})
	for _, name := range []string{"kill-owner", "kill-owner-no-replicas", "partition"} {
		t.Run(name, func(t *testing.T) {
			sc, _ := Lookup(name)
			res, err := r.Run(ctx, sc)
			var out strings.Builder
			if res != nil {
				Print(&out, res)
			}
			passed := err == nil && res.Passed
			if passed && sc.Contrast && (res.Crash == nil || res.Crash.Total == 0) {
				passed = false
				err = fmt.Errorf("replication off, yet no crash key over its limit")
			}
			if !passed {
				failed = true
				t.Fatalf("%s: err %v\nprogress:\n%s%s", name, err, log.String(), out.String())
			}
			t.Log(out.String())
		})
	}
}
