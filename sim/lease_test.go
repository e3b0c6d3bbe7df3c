package sim

import "testing"

// The lease mode over the seeds' fault histories: every node a holder of
// leases for the calls made through it, the checker's promises unchanged.
// A seed without membership faults must keep them all. Under joins,
// leaves and restarts the protocol core has open findings (two nodes that
// each count a key by their own ring, known-failures.txt): leases change
// every seed's schedule, so which seeds meet them changes too; the test
// logs how many fail with and without leases, and fails only when a
// fault-free seed breaks a promise.
func TestLeaseModeSeeds(t *testing.T) {
	seeds := 100 // 300 seeds: 70 fault-free all kept, 3 failing with leases and 3 without
	if testing.Short() {
		seeds = 30
	}
	local, withLeases, without, calm := 0, 0, 0, 0
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		res := Run(seed, Options{Leases: true})
		for _, c := range res.Calls {
			if c.Allowed && c.Start == c.End {
				local++
			}
		}
		if len(res.Plan.Faults) == 0 {
			calm++
			if res.Failed() {
				t.Fatalf("seed %d (no membership faults) breaks a promise with leases: %s", seed, res.Reason())
			}
		}
		if res.Failed() {
			withLeases++
		}
		if base := Run(seed, Options{}); base.Failed() {
			without++
		}
	}
	if local == 0 {
		t.Fatal("no call was decided from a lease in any seed")
	}
	t.Logf("%d seeds (%d without membership faults): %d calls decided from leases; %d seeds break a promise with leases, %d without", seeds, calm, local, withLeases, without)
}
