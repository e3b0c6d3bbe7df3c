package sim

import "testing"

// The lease mode over the seeds' fault histories: every node a holder of
// leases for the calls made through it, the checker's promises unchanged.
func TestLeaseModeSeeds(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 40
	}
	local := 0
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		res := Run(seed, Options{Leases: true})
		if res.Failed() {
			t.Fatalf("seed %d with leases: %s", seed, res.Reason())
		}
		for _, c := range res.Calls {
			if c.Allowed && c.Start == c.End {
				local++
			}
		}
	}
	if local == 0 {
		t.Fatal("no call was decided from a lease in any seed")
	}
	t.Logf("%d seeds, %d calls decided from leases", seeds, local)
}
