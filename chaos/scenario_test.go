package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// Every scenario names its protection, a guard check and a sabotage, and
// its sabotaged run turns exactly that on.
func TestScenariosSabotage(t *testing.T) {
	for _, sc := range Scenarios() {
		if sc.Protection == "" || sc.Guard == "" || sc.Sabotage.Doc == "" {
			t.Errorf("%s: protection %q, guard %q, sabotage %q: want all set", sc.Name, sc.Protection, sc.Guard, sc.Sabotage.Doc)
		}
		if sc.Contrast {
			continue
		}
		sb, ok := Lookup(sc.Name + "-sabotaged")
		if !ok || !sb.Contrast || sb.Promise || sb.Guard != sc.Guard {
			t.Fatalf("%s-sabotaged: found %v, contrast %v, promise %v, guard %q", sc.Name, ok, sb != nil && sb.Contrast, sb != nil && sb.Promise, sb.Guard)
		}
		a, n := sb.nodeArgs(Options{Timeout: 250 * time.Millisecond}), sc.nodeArgs(Options{Timeout: 250 * time.Millisecond})
		if n.Sabotage != "" || n.Timeout != 250*time.Millisecond {
			t.Errorf("%s: normal run's node args %+v carry a sabotage", sc.Name, n)
		}
		if a == n {
			t.Errorf("%s-sabotaged: node args %+v same as the normal run's", sc.Name, a)
		}
	}
	k, _ := Lookup("kill-owner-no-replicas")
	if !k.Contrast || k.Replicas != 0 || k.Guard != "crash keys" {
		t.Errorf("kill-owner-no-replicas: contrast %v, replicas %d, guard %q", k.Contrast, k.Replicas, k.Guard)
	}
}

// A normal run never passes the harness's own RINGLIMIT_SABOTAGE on.
func TestNodeEnv(t *testing.T) {
	env := []string{"PATH=/bin", "RINGLIMIT_SABOTAGE=handoff", "RINGLIMIT_X=1"}
	if got := nodeEnv(env, ""); slices.ContainsFunc(got, func(kv string) bool { return strings.HasPrefix(kv, "RINGLIMIT_SABOTAGE=") }) || len(got) != 2 {
		t.Errorf("nodeEnv(normal) = %q", got)
	}
	if got := nodeEnv(env, "forward"); !slices.Equal(got, []string{"PATH=/bin", "RINGLIMIT_X=1", "RINGLIMIT_SABOTAGE=forward"}) {
		t.Errorf("nodeEnv(forward) = %q", got)
	}
}
