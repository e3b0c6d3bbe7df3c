package sim

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/internal/sabotage"
)

var mutationSeeds = flag.Int("sim.mutation-seeds", 1000, "seeds TestMutations tries per mutation")

// TestMutations plants each mutation behind its test-only switch and
// asserts that the simulator catches it within 1,000 seeds: some seed
// fails with the switch on and passes with it off (a seed the real core
// fails anyway proves nothing about the mutation). sim/MUTATIONS.md
// records the seeds.
func TestMutations(t *testing.T) {
	if testing.Short() {
		t.Skip("up to 1,000 seeds per mutation")
	}
	for _, m := range []string{sabotage.NoFetch, sabotage.CountHandedOff, sabotage.DropReplica, sabotage.LastHop} {
		t.Run(m, func(t *testing.T) {
			caught, tried, baseFails := uint64(0), 0, 0
			for start := uint64(1); caught == 0 && tried < *mutationSeeds; {
				n := min(16, *mutationSeeds-tried)
				var failed []uint64
				restore := sabotage.Set(m)
				RunSeeds(start, n, 0, Options{}, func(r *Result) bool {
					if r.Err != nil && strings.Contains(r.Err.Error(), "not wired") {
						t.Skip(r.Err)
					}
					if r.Err != nil {
						t.Errorf("seed %d with %s: the run failed: %v", r.Seed, m, r.Err)
					}
					if r.Failed() {
						failed = append(failed, r.Seed)
					}
					return false
				})
				restore()
				for _, seed := range failed {
					if base := Run(seed, Options{}); base.Failed() {
						baseFails++
						continue
					}
					caught = seed
					break
				}
				start += uint64(n)
				tried += n
			}
			if caught == 0 {
				t.Fatalf("mutation %s not caught in %d seeds (%d seeds failed with and without it)", m, tried, baseFails)
			}
			t.Logf("mutation %s caught by seed %d: %s", m, caught, Replay(caught, 0, m))
		})
	}
}

// TestDeterministic runs seeds twice with the real core: the histories
// must be equal byte for byte.
func TestDeterministic(t *testing.T) {
	n := uint64(40)
	if testing.Short() {
		n = 8
	}
	for seed := uint64(1); seed <= n; seed++ {
		a, b := Run(seed, Options{}), Run(seed, Options{})
		if a.Err != nil && strings.Contains(a.Err.Error(), "not wired") {
			t.Skip(a.Err)
		}
		if !bytes.Equal(a.History, b.History) {
			al, bl := bytes.Split(a.History, []byte("\n")), bytes.Split(b.History, []byte("\n"))
			for i := range min(len(al), len(bl)) {
				if !bytes.Equal(al[i], bl[i]) {
					t.Fatalf("seed %d: two runs differ first at line %d:\n%s\n%s", seed, i+1, al[i], bl[i])
				}
			}
			t.Fatalf("seed %d: two runs differ in length (%d and %d bytes)", seed, len(a.History), len(b.History))
		}
	}
}
