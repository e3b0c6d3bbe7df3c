package ring

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/buraksezer/consistent"
)

func mustNew(t testing.TB, members ...string) *Ring {
	t.Helper()
	r, err := New(members, Config{})
	if err != nil {
		t.Fatalf("New(%q) = %v", members, err)
	}
	return r
}

func TestDistribution(t *testing.T) {
	r := mustNew(t, "a", "b", "c")
	counts := map[string]int{}
	const n = 300_000
	for i := range n {
		o, err := r.Owner(fmt.Sprintf("key-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		counts[o]++
	}
	t.Logf("3 members, %d keys: %v", n, counts)
	if len(counts) != 3 {
		t.Fatalf("owners = %v, want all 3 members", counts)
	}
	// The load bound is 1.25 * average; partition granularity adds noise.
	for m, c := range counts {
		if share := float64(c) / n; share < 0.20 || share > 0.45 {
			t.Errorf("member %s owns %.1f%% of keys, want 20%%..45%%", m, 100*share)
		}
	}
}

func TestStableAcrossOrderAndDuplicates(t *testing.T) {
	r1 := mustNew(t, "a", "b", "c")
	r2 := mustNew(t, "c", "a", "b", "a", "c")
	if r1.Version() != r2.Version() {
		t.Fatalf("Version %x != %x for the same set", r1.Version(), r2.Version())
	}
	if !slices.Equal(r2.Members(), []string{"a", "b", "c"}) {
		t.Fatalf("Members = %q", r2.Members())
	}
	for i := range 10_000 {
		k := fmt.Sprint(i)
		o1, _ := r1.Owner(k)
		o2, _ := r2.Owner(k)
		s1, _ := r1.Successors(k, 3)
		s2, _ := r2.Successors(k, 3)
		if o1 != o2 || !slices.Equal(s1, s2) {
			t.Fatalf("key %q: owner %s/%s successors %v/%v", k, o1, o2, s1, s2)
		}
	}
}

func TestVersionDiffers(t *testing.T) {
	seen := map[uint64][]string{}
	for _, set := range [][]string{{"a"}, {"b"}, {"a", "b"}, {"ab"}, {"a", "bc"}, {"ab", "c"}, {"a", "b", "c"}} {
		v := mustNew(t, set...).Version()
		if prev, ok := seen[v]; ok {
			t.Fatalf("sets %q and %q share version %x", prev, set, v)
		}
		seen[v] = set
	}
	r1, _ := New([]string{"a", "b"}, Config{})
	r2, _ := New([]string{"a", "b"}, Config{PartitionCount: 101})
	if r1.Version() == r2.Version() {
		t.Error("different configs give the same Version")
	}
}

func TestRoutingKey(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"plain", "plain"},
		{"{user1}:a", "user1"},
		{"x{user1}y", "user1"},
		{"a{b}c{d}", "b"},
		{"{}x{y}", "{}x{y}"},
		{"{", "{"},
		{"}{", "}{"},
		{"a{bc", "a{bc"},
		{"{{a}}", "{a"},
		{"", ""},
	} {
		if got := RoutingKey(tc.key); got != tc.want {
			t.Errorf("RoutingKey(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

func TestHashTagsShareOwner(t *testing.T) {
	r := mustNew(t, "a", "b", "c", "d", "e")
	for i := range 1000 {
		tag := fmt.Sprintf("user%d", i)
		want, _ := r.Owner(tag)
		for _, k := range []string{"{" + tag + "}:a", "{" + tag + "}:b", "rl:{" + tag + "}:login"} {
			if got, _ := r.Owner(k); got != want {
				t.Fatalf("Owner(%q) = %s, Owner(%q) = %s", k, got, tag, want)
			}
			s, _ := r.Successors(k, 2)
			if s[0] != want {
				t.Fatalf("Successors(%q)[0] = %s, want %s", k, s[0], want)
			}
		}
	}
}

// Adding a member moves keys to it. Bounded loads lower every member's cap
// when a member joins, so a few partitions can also move between the old
// members (0-6 of 271 in the sets below); hand-off must cope with that. The
// test bounds it rather than asserting it never happens.
func TestAddMemberMovesKeysMostlyToIt(t *testing.T) {
	for _, set := range [][]string{
		{"node-1", "node-2", "node-3", "node-4"},
		{"a", "b", "c", "d"},
		{"n1", "n2", "n3", "n4"},
		{"127.0.0.1:7946", "127.0.0.1:7947", "127.0.0.1:7948", "127.0.0.1:7949"},
	} {
		r3 := mustNew(t, set[:3]...)
		r4 := mustNew(t, set...)
		const n = 100_000
		toNew, betweenOld := 0, 0
		for i := range n {
			k := fmt.Sprintf("key-%d", i)
			o3, _ := r3.Owner(k)
			o4, _ := r4.Owner(k)
			switch {
			case o3 == o4:
			case o4 == set[3]:
				toNew++
			default:
				betweenOld++
			}
		}
		t.Logf("%q: adding %s moved %.1f%% of keys to it, %.2f%% between old members",
			set[:3], set[3], 100*float64(toNew)/n, 100*float64(betweenOld)/n)
		if toNew < n/10 {
			t.Errorf("%q: only %d of %d keys moved to the new member", set, toNew, n)
		}
		if betweenOld > n*3/100 {
			t.Errorf("%q: %d of %d keys moved between old members, want <= 3%%", set, betweenOld, n)
		}
	}
	// With these names (the ones the environment notes measured) no key
	// moves between old members at all.
	r3 := mustNew(t, "node-1", "node-2", "node-3")
	r4 := mustNew(t, "node-1", "node-2", "node-3", "node-4")
	for i := range 10_000 {
		k := fmt.Sprint(i)
		o3, _ := r3.Owner(k)
		if o4, _ := r4.Owner(k); o3 != o4 && o4 != "node-4" {
			t.Fatalf("key %q moved %s -> %s", k, o3, o4)
		}
	}
}

func TestMatchesConsistent(t *testing.T) {
	names := []string{"node-1", "node-2", "node-3", "node-4"}
	r := mustNew(t, names...)
	ms := make([]consistent.Member, len(names))
	for i, n := range names {
		ms[i] = member(n)
	}
	c := consistent.New(ms, consistent.Config{Hasher: hasher{}, PartitionCount: 271, ReplicationFactor: 20, Load: 1.25})
	for i := range 5000 {
		k := fmt.Sprintf("k%d", i)
		got, _ := r.Owner(k)
		if want := c.LocateKey([]byte(k)).String(); got != want {
			t.Fatalf("Owner(%q) = %s, consistent says %s", k, got, want)
		}
		s, _ := r.Successors(k, 3)
		cs, err := c.GetClosestN([]byte(k), 3)
		if err != nil {
			t.Fatal(err)
		}
		for j := range cs {
			if s[j] != cs[j].String() {
				t.Fatalf("Successors(%q) = %v, consistent says %v", k, s, cs)
			}
		}
	}
}

func TestSuccessors(t *testing.T) {
	r := mustNew(t, "a", "b", "c")
	for i := range 1000 {
		k := fmt.Sprint(i)
		owner, _ := r.Owner(k)
		for n := -1; n <= 5; n++ {
			s, err := r.Successors(k, n)
			if err != nil {
				t.Fatalf("Successors(%q, %d): %v", k, n, err)
			}
			if want := max(0, min(n, 3)); len(s) != want {
				t.Fatalf("Successors(%q, %d) = %v, want %d members", k, n, s, want)
			}
			if len(s) > 0 && s[0] != owner {
				t.Fatalf("Successors(%q, %d)[0] = %s, want owner %s", k, n, s[0], owner)
			}
			seen := map[string]bool{}
			for _, m := range s {
				if seen[m] || !r.Has(m) {
					t.Fatalf("Successors(%q, %d) = %v: duplicate or unknown", k, n, s)
				}
				seen[m] = true
			}
		}
		// Prefixes agree: asking for fewer gives the start of asking for more.
		s2, _ := r.Successors(k, 2)
		s3, _ := r.Successors(k, 3)
		if !slices.Equal(s2, s3[:2]) {
			t.Fatalf("Successors(%q): 2 = %v, 3 = %v", k, s2, s3)
		}
	}
	// The caller owns the slice.
	s, _ := r.Successors("x", 3)
	s[0] = "zzz"
	if s2, _ := r.Successors("x", 3); s2[0] == "zzz" {
		t.Fatal("Successors returned shared storage")
	}
}

func TestSingleMember(t *testing.T) {
	r := mustNew(t, "solo")
	if o, err := r.Owner("anything"); err != nil || o != "solo" {
		t.Fatalf("Owner = %q, %v", o, err)
	}
	if s, _ := r.Successors("anything", 3); !slices.Equal(s, []string{"solo"}) {
		t.Fatalf("Successors = %v", s)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []string
		cfg     Config
		want    error
		field   string
	}{
		{"nil members", nil, Config{}, ErrEmpty, ""},
		{"empty members", []string{}, Config{}, ErrEmpty, ""},
		{"empty name", []string{"a", ""}, Config{}, ErrInvalidMember, ""},
		{"negative partitions", []string{"a"}, Config{PartitionCount: -1}, ErrInvalidConfig, "PartitionCount"},
		{"negative replication", []string{"a"}, Config{ReplicationFactor: -5}, ErrInvalidConfig, "ReplicationFactor"},
		{"load below 1", []string{"a"}, Config{Load: 0.5}, ErrInvalidConfig, "Load"},
		{"load NaN", []string{"a"}, Config{Load: math.NaN()}, ErrInvalidConfig, "Load"},
		{"load Inf", []string{"a"}, Config{Load: math.Inf(1)}, ErrInvalidConfig, "Load"},
		{"more members than partitions", []string{"a", "b", "c"}, Config{PartitionCount: 2}, ErrLoad, ""},
		{"load too tight", manyNames(100), Config{Load: 1}, ErrLoad, ""},
		{"one replica point", manyNames(7), Config{ReplicationFactor: 1, PartitionCount: 7, Load: 1}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.members, tc.cfg)
			if tc.want == nil {
				// Either a ring or ErrLoad, never a panic.
				if err != nil && !errors.Is(err, ErrLoad) {
					t.Fatalf("New = %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || r != nil {
				t.Fatalf("New = %v, %v; want error %v", r, err, tc.want)
			}
			if tc.field != "" {
				var ce *ConfigError
				if !errors.As(err, &ce) || ce.Field != tc.field {
					t.Fatalf("error %v does not name field %s", err, tc.field)
				}
			}
		})
	}
}

func manyNames(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("node-%03d", i)
	}
	return s
}

func TestNilRing(t *testing.T) {
	var r *Ring
	if _, err := r.Owner("k"); !errors.Is(err, ErrEmpty) {
		t.Errorf("Owner on nil ring: %v", err)
	}
	if _, err := r.Successors("k", 1); !errors.Is(err, ErrEmpty) {
		t.Errorf("Successors on nil ring: %v", err)
	}
	if r.Len() != 0 || r.Has("a") || r.Members() != nil || r.Version() != 0 {
		t.Error("nil ring is not empty")
	}
}

func TestOwnerDoesNotAllocate(t *testing.T) {
	r := mustNew(t, "a", "b", "c")
	keys := []string{"plain", "{tag}:x"}
	if n := testing.AllocsPerRun(1000, func() {
		for _, k := range keys {
			_, _ = r.Owner(k)
		}
	}); n != 0 {
		t.Fatalf("Owner allocates %v times per run", n)
	}
}

func TestManyMembers(t *testing.T) {
	r, err := New(manyNames(200), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 200 {
		t.Fatalf("Len = %d", r.Len())
	}
}

// AppendSuccessors appends what Successors returns, after what dst holds.
func TestAppendSuccessors(t *testing.T) {
	r := mustNew(t, "a", "b", "c")
	buf := []string{"x"}
	for i := range 100 {
		k := fmt.Sprint(i)
		for n := -1; n <= 4; n++ {
			want, _ := r.Successors(k, n)
			got, err := r.AppendSuccessors(buf[:1], k, n)
			if err != nil || got[0] != "x" || !slices.Equal(got[1:], want) {
				t.Fatalf("AppendSuccessors([x], %q, %d) = %v, %v; want [x] then %v", k, n, got, err, want)
			}
			buf = got
		}
	}
	var nilRing *Ring
	if _, err := nilRing.AppendSuccessors(nil, "k", 1); !errors.Is(err, ErrEmpty) {
		t.Fatalf("a nil ring: %v; want ErrEmpty", err)
	}
}
