package sabotage

import (
	"sync"
	"testing"
)

func TestOn(t *testing.T) {
	t.Setenv(Env, " handoff, bogus ,,")
	once, on = sync.Once{}, nil
	t.Cleanup(func() { once, on = sync.Once{}, nil })
	if !On(HandOff) || On(Forward) || On(Majority) {
		t.Fatalf("On: handoff %v forward %v majority %v, want true false false", On(HandOff), On(Forward), On(Majority))
	}
	if got := Active(); len(got) != 2 || got[0] != "handoff" || got[1] != "bogus" {
		t.Fatalf("Active() = %q, want [handoff bogus]", got)
	}
}

func TestOffByDefault(t *testing.T) {
	t.Setenv(Env, "")
	once, on = sync.Once{}, nil
	t.Cleanup(func() { once, on = sync.Once{}, nil })
	for _, s := range Known {
		if On(s) {
			t.Fatalf("On(%q) with %s empty", s, Env)
		}
	}
}
