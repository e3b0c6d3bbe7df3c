package sim

import (
	"bytes"
	"testing"
)

func TestToyRunDeterministic(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		a := Run(seed, Options{NewCore: newToyCore})
		if a.Err != nil {
			t.Fatalf("seed %d: %v", seed, a.Err)
		}
		b := Run(seed, Options{NewCore: newToyCore})
		if !bytes.Equal(a.History, b.History) {
			al, bl := bytes.Split(a.History, []byte("\n")), bytes.Split(b.History, []byte("\n"))
			for i := range min(len(al), len(bl)) {
				if !bytes.Equal(al[i], bl[i]) {
					t.Fatalf("seed %d: two runs gave different histories; first difference at line %d:\n%s\n%s", seed, i+1, al[i], bl[i])
				}
			}
			t.Fatalf("seed %d: two runs gave different histories (%d and %d bytes)", seed, len(a.History), len(b.History))
		}
		t.Logf("seed %d: nodes %d faults %v calls %d admitted %d errors %d steps %d exact %d bound %d failures %v",
			seed, a.Plan.Nodes, a.Plan.Faults, a.Check.Calls, a.Check.Admitted, a.Check.Errors, a.Steps, a.Check.MaxExact, a.Check.MaxBound, a.Check.Failures)
	}
}
