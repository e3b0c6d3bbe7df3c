package sabotage

import (
	"sync"
	"testing"
)

func TestOn(t *testing.T) {
	t.Setenv(Env, " handoff, bogus ,,")
	once = sync.Once{}
	t.Cleanup(func() { once = sync.Once{} })
	if !On(HandOff) || On(Forward) || On(Majority) {
		t.Fatalf("On: handoff %v forward %v majority %v, want true false false", On(HandOff), On(Forward), On(Majority))
	}
	if got := Active(); len(got) != 2 || got[0] != "handoff" || got[1] != "bogus" {
		t.Fatalf("Active() = %q, want [handoff bogus]", got)
	}
}

func TestOffByDefault(t *testing.T) {
	t.Setenv(Env, "")
	once = sync.Once{}
	t.Cleanup(func() { once = sync.Once{} })
	for _, s := range Known {
		if On(s) {
			t.Fatalf("On(%q) with %s empty", s, Env)
		}
	}
}

func TestSet(t *testing.T) {
	t.Setenv(Env, "handoff")
	once = sync.Once{}
	t.Cleanup(func() { once = sync.Once{} })
	restore := Set(NoFetch)
	if !On(NoFetch) || On(HandOff) {
		t.Fatalf("after Set(nofetch): nofetch %v handoff %v, want true false", On(NoFetch), On(HandOff))
	}
	restore()
	if On(NoFetch) || !On(HandOff) {
		t.Fatalf("after restore: nofetch %v handoff %v, want false true", On(NoFetch), On(HandOff))
	}
}
