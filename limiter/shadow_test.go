package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/limiter"
)

func shadowLogger() (*slog.Logger, *testenv.LogBuffer) {
	b := &testenv.LogBuffer{}
	h := slog.NewTextHandler(b, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			return slog.Attr{}
		}
		return a
	}})
	return slog.New(h), b
}

// sameShadowVerdict compares what a verdict says (Release and Failure are not
// comparable).
func sameShadowVerdict(a, b limiter.Verdict) bool {
	return a.Allowed == b.Allowed && a.Shadowed == b.Shadowed && a.Remaining == b.Remaining &&
		a.RetryAfter == b.RetryAfter && a.RetryAt.Equal(b.RetryAt) && a.ResetAt.Equal(b.ResetAt) &&
		(a.Release == nil) == (b.Release == nil) && a.Failure == b.Failure
}

// Shadow mode changes the answer, never the counting: the same calls
// through a shadowed store and an enforcing twin get the same verdicts
// but for Allowed and Shadowed, and leave the same counts behind, for
// every algorithm. A refused call records nothing in either.
func TestShadowRecordsWhatEnforcingRecords(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	for _, l := range []limiter.Limit{
		{Algorithm: limiter.SlidingLog, Uses: 3, Window: time.Minute, Name: "log"},
		{Algorithm: limiter.SlidingWindow, Uses: 3, Window: time.Minute},
		{Algorithm: limiter.TokenBucket, Uses: 3, Window: time.Minute},
		{Algorithm: limiter.FixedWindow, Uses: 3, Window: time.Minute},
	} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			clock := limiter.NewFakeClock(t0)
			shadowMem := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1, Seed: 1})
			enforcing := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1, Seed: 1})
			defer shadowMem.Close()
			defer enforcing.Close()
			logger, _ := shadowLogger()
			shadow := limiter.Shadow(shadowMem, limiter.ShadowLogger(logger), limiter.ShadowClock(clock))
			ctx := context.Background()
			refused := 0
			// Bursts of 5 calls (3 pass, then refusals), 7 s apart.
			for step := range 20 {
				if step%5 == 0 && step > 0 {
					clock.Advance(7 * time.Second)
				}
				e := []limiter.Entry{{Key: "k", Limit: l}}
				got, err := shadow.ConsumeMany(ctx, e)
				if err != nil {
					t.Fatal(err)
				}
				want, err := enforcing.ConsumeMany(ctx, e)
				if err != nil {
					t.Fatal(err)
				}
				if !got.Allowed || got.Shadowed != !want.Allowed {
					t.Fatalf("step %d: shadow Allowed %v Shadowed %v, enforcing Allowed %v", step, got.Allowed, got.Shadowed, want.Allowed)
				}
				if !want.Allowed {
					refused++
					want.Allowed, want.Shadowed = true, true
				}
				if !sameShadowVerdict(got, want) {
					t.Fatalf("step %d: shadow %+v, want the enforcing store's %+v", step, got, want)
				}
				// The counts behind both are the same.
				a, _ := shadowMem.PeekMany(ctx, e)
				b, _ := enforcing.PeekMany(ctx, e)
				if !sameShadowVerdict(a, b) {
					t.Fatalf("step %d: after the call the shadowed store peeks %+v, the enforcing one %+v", step, a, b)
				}
			}
			if refused == 0 {
				t.Fatal("no call was refused: the test shows nothing")
			}
			if st := shadow.Stats(); st.Calls != 20 || st.WouldRefuse != int64(refused) {
				t.Fatalf("Stats() = %+v, want 20 calls, %d would refuse", st, refused)
			}
		})
	}
}

// The would-refuse log is throttled as the failure log is: the first line
// at once, then one per ShadowLogEvery with the count not logged.
func TestShadowLogThrottle(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := limiter.NewFakeClock(t0)
	mem := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1})
	defer mem.Close()
	logger, buf := shadowLogger()
	shadow := limiter.Shadow(mem, limiter.ShadowLogger(logger), limiter.ShadowClock(clock),
		limiter.ShadowLogKeys(func(k string) slog.Attr { return slog.String("key_hash", "h("+k+")") }))
	ctx := context.Background()
	login := limiter.Limit{Uses: 1, Window: time.Hour, Name: "login"}
	consume := func(key string) {
		t.Helper()
		if v, err := limiter.Consume(ctx, shadow, key, login); err != nil || !v.Allowed {
			t.Fatalf("Consume(%q) = %+v, %v: shadow mode lets every call through", key, v, err)
		}
	}
	consume("ann") // allowed: no line
	if lines := buf.Lines(); len(lines) != 0 {
		t.Fatalf("an allowed call logged %q", lines)
	}
	consume("ann")
	for range 4 {
		clock.Advance(2 * time.Second)
		consume("ann") // within 10 s of the first line: not logged
	}
	clock.Advance(2 * time.Second) // 10 s after the first line
	consume("ann")
	want := []string{
		`level=INFO msg="rate limit would have refused" limit=login rule=1/1h key_hash=h(ann) retry_after=1h0m0s not_logged=0`,
		`level=INFO msg="rate limit would have refused" limit=login rule=1/1h key_hash=h(ann) retry_after=59m50s not_logged=4`,
	}
	if got := buf.Lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("log:\n got  %q\n want %q", got, want)
	}
	if st := shadow.Stats(); st.Calls != 7 || st.WouldRefuse != 6 {
		t.Fatalf("Stats() = %+v, want 7 calls, 6 would refuse", st)
	}
}

// Peeks answer shadowed and are not counted; errors pass through; a
// shadowed verdict has no Release (nothing was recorded).
func TestShadowPeekErrorsRelease(t *testing.T) {
	mem := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	defer mem.Close()
	logger, buf := shadowLogger()
	shadow := limiter.Shadow(mem, limiter.ShadowLogger(logger))
	ctx := limiter.WithRelease(context.Background())
	one := limiter.Limit{Uses: 1, Window: time.Hour}
	v, err := limiter.Consume(ctx, shadow, "k", one)
	if err != nil || !v.Allowed || v.Shadowed || v.Release == nil {
		t.Fatalf("first call: %+v, %v; want allowed with a Release", v, err)
	}
	v, err = limiter.Consume(ctx, shadow, "k", one)
	if err != nil || !v.Allowed || !v.Shadowed || v.Release != nil || v.RetryAfter <= 0 {
		t.Fatalf("second call: %+v, %v; want Allowed, Shadowed, the refusal's wait, no Release", v, err)
	}
	p, err := limiter.Peek(ctx, shadow, "k", one)
	if err != nil || !p.Allowed || !p.Shadowed {
		t.Fatalf("Peek: %+v, %v; want Allowed and Shadowed", p, err)
	}
	if st := shadow.Stats(); st.Calls != 2 || st.WouldRefuse != 1 {
		t.Fatalf("Stats() = %+v after a peek, want 2 calls, 1 would refuse", st)
	}
	if n := len(buf.Lines()); n != 1 {
		t.Fatalf("%d log lines, want 1 (peeks are not logged)", n)
	}
	_, err = limiter.Consume(ctx, shadow, "", one)
	var ie *limiter.InputError
	if !errors.As(err, &ie) || ie.Field != "entries[0].key" {
		t.Fatalf("empty key: %v, want the store's *InputError", err)
	}
	_, err = limiter.Consume(ctx, limiter.Shadow(nil), "k", one)
	if !errors.As(err, &ie) || ie.Field != "store" {
		t.Fatalf("nil store: %v, want an *InputError naming store", err)
	}
}

// A name is metadata: it is checked, and it does not name the counter.
func TestLimitName(t *testing.T) {
	mem := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	defer mem.Close()
	ctx := context.Background()
	a := limiter.Limit{Uses: 1, Window: time.Hour, Name: "a"}
	b := a
	b.Name = "b"
	if v, err := limiter.Consume(ctx, mem, "k", a); err != nil || !v.Allowed {
		t.Fatalf("%+v, %v", v, err)
	}
	if v, err := limiter.Consume(ctx, mem, "k", b); err != nil || v.Allowed {
		t.Fatalf("the same key, algorithm and window under another name: %+v, %v; want the same counter (refused)", v, err)
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"", true},
		{"POST /login", true},
		{"héllo", true},
		{strings.Repeat("n", limiter.MaxNameBytes), true},
		{strings.Repeat("n", limiter.MaxNameBytes+1), false},
		{"bad\xff", false},
	} {
		l := limiter.Limit{Uses: 1, Window: time.Second, Name: tc.name}
		err := l.Validate()
		var ie *limiter.InputError
		if tc.ok != (err == nil) || (err != nil && (!errors.As(err, &ie) || ie.Field != "name")) {
			t.Errorf("Validate(name %q) = %v, want ok %v (else an *InputError naming name)", tc.name, err, tc.ok)
		}
		_, err = limiter.Consume(ctx, mem, "n", l)
		if !tc.ok && (!errors.As(err, &ie) || ie.Field != "entries[0].limit.name") {
			t.Errorf("Consume(name %q) = %v, want an *InputError naming entries[0].limit.name", tc.name, err)
		}
	}
}

// A rollout: a new limit runs in shadow mode first, and the log and
// Stats say what it would have refused.
func ExampleShadow() {
	clock := limiter.NewFakeClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	store := limiter.NewMemory(limiter.MemoryConfig{Clock: clock})
	defer store.Close()
	shadow := limiter.Shadow(store, limiter.ShadowClock(clock))
	search := limiter.Limit{Uses: 2, Window: time.Minute, Name: "search"}
	for i := 1; i <= 3; i++ {
		v, err := limiter.Consume(context.Background(), shadow, "user:42", search)
		if err != nil {
			panic(err)
		}
		fmt.Printf("call %d: allowed %v, would have refused %v\n", i, v.Allowed, v.Shadowed)
	}
	fmt.Printf("%+v\n", shadow.Stats())
	// Output:
	// call 1: allowed true, would have refused false
	// call 2: allowed true, would have refused false
	// call 3: allowed true, would have refused true
	// {Calls:3 WouldRefuse:1}
}
