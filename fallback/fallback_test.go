package fallback_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/limiter/storetest"
)

func TestParsePolicy(t *testing.T) {
	for _, c := range []struct {
		in   string
		want fallback.Policy
		ok   bool
	}{
		{"deny", fallback.Deny, true},
		{"allow", fallback.Allow, true},
		{"local", fallback.Local, true},
		{"", 0, false},
		{"Deny", 0, false},
		{"open", 0, false},
		{"allow ", 0, false},
	} {
		got, err := fallback.ParsePolicy(c.in)
		if c.ok {
			if err != nil || got != c.want {
				t.Errorf("ParsePolicy(%q) = %v, %v; want %v", c.in, got, err, c.want)
			}
			if got.String() != c.in {
				t.Errorf("%v.String() = %q", got, got.String())
			}
			continue
		}
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != "policy" || !errors.Is(err, limiter.ErrInvalid) {
			t.Errorf("ParsePolicy(%q) = %v, %v; want an InputError on field policy", c.in, got, err)
		}
	}
	var p fallback.Policy
	if err := p.UnmarshalText([]byte("fail-open")); err == nil {
		t.Error("UnmarshalText(fail-open) = nil error")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	defer m.Close()
	for _, c := range []struct {
		name  string
		store limiter.Store
		cfg   fallback.Config
		field string
	}{
		{"nil store", nil, fallback.Config{Logger: discard}, "store"},
		{"negative timeout", m, fallback.Config{Logger: discard, Timeout: -time.Second}, "Timeout"},
		{"unknown policy", m, fallback.Config{Logger: discard, Policy: 7}, "Policy"},
		{"negative late wait", m, fallback.Config{Logger: discard, LateWait: -1}, "LateWait"},
		{"negative max pending", m, fallback.Config{Logger: discard, MaxPending: -1}, "MaxPending"},
	} {
		_, err := fallback.New(c.store, c.cfg)
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("%s: New = %v; want an InputError on %s", c.name, err, c.field)
		}
	}
}

// The wrapper passes the store's answers through. Its Timeout here is one
// no scheduling stall reaches: with the default 250 ms, a call's goroutine
// that a busy machine did not run in time (load 24 on 2 cores) got the
// deny policy's refusal, for an in-memory store. Timeouts are tested under
// synctest above.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) limiter.Store {
		m := limiter.NewMemory(limiter.MemoryConfig{})
		s, err := fallback.New(m, fallback.Config{Logger: discard, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.Close(context.Background()); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	})
}

// Each policy's verdict for a store that stalls past Timeout.
func TestPoliciesOnStall(t *testing.T) {
	for _, c := range []struct {
		policy  fallback.Policy
		allowed []bool // successive calls
	}{
		{fallback.Deny, []bool{false, false, false}},
		{fallback.Allow, []bool{true, true, true}},
		// Uses 3 shared by 2 members: ceil(3/2) = 2 locally.
		{fallback.Local, []bool{true, true, false}},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newSlowStore(t)
				st.stall()
				s, err := fallback.New(st, fallback.Config{Logger: discard, Policy: c.policy, Share: func() int { return 2 }, KeepStoreOpen: true})
				if err != nil {
					t.Fatal(err)
				}
				for i, want := range c.allowed {
					start := time.Now()
					v, err := limiter.Consume(ctx(), s, "k", minute)
					if err != nil {
						t.Fatalf("call %d: %v", i, err)
					}
					if took := time.Since(start); took != fallback.DefaultTimeout {
						t.Errorf("call %d answered after %v, want exactly the timeout %v", i, took, fallback.DefaultTimeout)
					}
					if v.Allowed != want {
						t.Errorf("call %d: Allowed = %v, want %v", i, v.Allowed, want)
					}
					var fe *fallback.FailureError
					if !errors.As(v.Failure, &fe) || fe.Policy != c.policy || !errors.Is(v.Failure, fallback.ErrTimeout) || len(fe.ID) != 16 {
						t.Errorf("call %d: Failure = %v; want a FailureError of policy %v caused by ErrTimeout", i, v.Failure, c.policy)
					}
					if fallback.IsLocal(v.Failure) != (c.policy == fallback.Local) {
						t.Errorf("call %d: IsLocal = %v", i, fallback.IsLocal(v.Failure))
					}
					if c.policy == fallback.Local && !v.Allowed && v.RetryAfter <= 0 {
						t.Errorf("call %d: a local refusal has RetryAfter %v", i, v.RetryAfter)
					}
					if v.Release != nil {
						t.Errorf("call %d: a policy verdict has a Release", i)
					}
				}
				if got := s.Stats(); got.Timeouts != 3 || got.Fallbacks != 3 {
					t.Errorf("stats %+v, want 3 timeouts and 3 fallbacks", got)
				}
				st.resume()
				if err := s.Close(ctx()); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// A store that answers with an error gets the policy at once.
func TestPoliciesOnError(t *testing.T) {
	boom := errors.New("connection refused")
	for _, p := range []fallback.Policy{fallback.Deny, fallback.Allow, fallback.Local} {
		st := newSlowStore(t)
		st.failWith(boom)
		s, err := fallback.New(st, fallback.Config{Logger: discard, Policy: p})
		if err != nil {
			t.Fatal(err)
		}
		v, err := limiter.Consume(ctx(), s, "k", minute)
		if err != nil {
			t.Fatalf("%v: %v", p, err)
		}
		if v.Allowed != (p != fallback.Deny) || !errors.Is(v.Failure, boom) {
			t.Errorf("%v: verdict %+v; want Allowed %v with Failure wrapping the store's error", p, v, p != fallback.Deny)
		}
		if got := s.Stats(); got.Errors != 1 || got.Timeouts != 0 {
			t.Errorf("%v: stats %+v", p, got)
		}
		if err := s.Close(ctx()); err != nil {
			t.Fatal(err)
		}
		if st.Events() != "close" {
			t.Errorf("%v: events %q, want the wrapped store closed", p, st.Events())
		}
	}
}

// Bad input is the caller's fault: it is an error, never a policy verdict,
// both when checked before the call and when the store itself refuses it.
func TestInputErrorsPassThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newSlowStore(t)
		st.stall()
		s, err := fallback.New(st, fallback.Config{Logger: discard, Policy: fallback.Allow, KeepStoreOpen: true})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = limiter.Consume(ctx(), s, "", minute)
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != "entries[0].key" {
			t.Errorf("empty key: %v; want an InputError on entries[0].key", err)
		}
		if time.Since(start) != 0 || st.entered.Load() != 0 {
			t.Error("bad input reached the store")
		}
		st.resume()
		s.Close(ctx())
	})

	// The store's own, tighter bound.
	tight := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1, Bounds: limiter.Bounds{MaxKeyBytes: 4}})
	s, err := fallback.New(tight, fallback.Config{Logger: discard, Policy: fallback.Allow})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx())
	v, err := limiter.Consume(ctx(), s, "longer-than-4", minute)
	if !errors.Is(err, limiter.ErrBound) || v.Failure != nil || v.Allowed {
		t.Errorf("store's bound: %+v, %v; want its ErrBound error, no verdict", v, err)
	}
	if s.Stats().Fallbacks != 0 {
		t.Error("an input error counted as a fallback")
	}
}

// settled waits for the background goroutines of the bubble.
func settled() { synctest.Wait() }

// Under Deny a late count is given back; under Allow it stays.
func TestLateVerdicts(t *testing.T) {
	for _, c := range []struct {
		name       string
		policy     fallback.Policy
		share      int
		callerAsks bool // the caller asks for Release itself
		released   bool
	}{
		{"deny releases", fallback.Deny, 1, false, true},
		{"deny releases when the caller asked for Release", fallback.Deny, 1, true, true},
		{"allow keeps", fallback.Allow, 1, false, false},
		{"local allowed keeps", fallback.Local, 1, false, false},
		// ceil(3/4) = 1 local use, taken by a first call; the second is
		// refused locally, so its late count is released.
		{"local refused releases", fallback.Local, 4, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newSlowStore(t)
				s, err := fallback.New(st, fallback.Config{Logger: discard, Policy: c.policy, Share: func() int { return c.share }, KeepStoreOpen: true})
				if err != nil {
					t.Fatal(err)
				}
				if c.share == 4 {
					// Take the single local use while the store stalls;
					// its late count stays.
					st.stall()
					if v, _ := limiter.Consume(ctx(), s, "k", minute); !v.Allowed {
						t.Fatal("first local call refused")
					}
					st.resume()
					settled()
				}
				before := st.remaining(t, "k", minute)
				st.stall()
				cctx := ctx()
				if c.callerAsks {
					cctx = limiter.WithRelease(cctx)
				}
				v, err := limiter.Consume(cctx, s, "k", minute)
				if err != nil || v.Failure == nil || v.Allowed == c.released {
					t.Fatalf("stalled call: %+v, %v", v, err)
				}
				st.resume()
				settled()
				want := before - 1
				if c.released {
					want = before
				}
				if got := st.remaining(t, "k", minute); got != want {
					t.Errorf("remaining after the late answer = %d, want %d (before: %d)", got, want, before)
				}
				stats := s.Stats()
				if (stats.LateReleased == 1) != c.released || stats.LateReleased+stats.LateKept != int64(1+c.share/4) {
					t.Errorf("stats %+v; want released = %v", stats, c.released)
				}
				if c.released && !strings.HasSuffix(st.Events(), "consume,release") {
					t.Errorf("events %q; want the late consume released", st.Events())
				}
				if err := s.Close(ctx()); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// A caller that gives up gets its context's error, and the count its call
// makes late is released.
func TestCallerCancelReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newSlowStore(t)
		s, err := fallback.New(st, fallback.Config{Logger: discard, Policy: fallback.Allow, KeepStoreOpen: true})
		if err != nil {
			t.Fatal(err)
		}
		st.stall()
		cctx, cancel := context.WithTimeout(ctx(), 10*time.Millisecond)
		defer cancel()
		v, err := limiter.Consume(cctx, s, "k", minute)
		if !errors.Is(err, context.DeadlineExceeded) || v.Allowed {
			t.Fatalf("got %+v, %v; want the caller's deadline error", v, err)
		}
		if s.Stats().Fallbacks != 0 {
			t.Error("the caller's own deadline counted as a store failure")
		}
		st.resume()
		settled()
		if r := st.remaining(t, "k", minute); r != 2 {
			t.Errorf("remaining = %d, want 2 (the abandoned call released)", r)
		}
		s.Close(ctx())
	})
}

// A stalled store never holds more than MaxPending goroutines: past the
// bound, calls are decided at once without reaching the store.
func TestStalledStoreBoundsGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newSlowStore(t)
		st.stall()
		s, err := fallback.New(st, fallback.Config{Logger: discard, Policy: fallback.Deny, MaxPending: 4, KeepStoreOpen: true})
		if err != nil {
			t.Fatal(err)
		}
		const callers = 50
		var wg sync.WaitGroup
		var mu sync.Mutex
		took := map[time.Duration]int{}
		for i := 0; i < callers; i++ {
			wg.Go(func() {
				start := time.Now()
				v, err := limiter.Consume(ctx(), s, "k", minute)
				if err != nil || v.Allowed || v.Failure == nil {
					t.Errorf("got %+v, %v", v, err)
				}
				mu.Lock()
				took[time.Since(start)]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if n := st.entered.Load(); n != 4 {
			t.Errorf("%d calls reached the stalled store, want 4", n)
		}
		if took[0] != callers-4 || took[fallback.DefaultTimeout] != 4 {
			t.Errorf("answer times %v; want 46 at once and 4 after the timeout", took)
		}
		if p := s.Pending(); p != 4 {
			t.Errorf("Pending = %d, want 4", p)
		}
		if got := s.Stats(); got.Overloaded != callers-4 || got.Timeouts != 4 {
			t.Errorf("stats %+v", got)
		}
		// Long after the deadline the stalled goroutines still hold their
		// slots, and still no more are started.
		time.Sleep(time.Minute)
		limiter.Consume(ctx(), s, "k", minute)
		if n := st.entered.Load(); n != 4 {
			t.Errorf("%d calls reached the stalled store, want 4", n)
		}
		st.resume()
		settled()
		if p := s.Pending(); p != 0 {
			t.Errorf("Pending after resume = %d", p)
		}
		s.Close(ctx())
	})
}

// Close waits for a late release under way before it closes the store.
func TestCloseWaitsForRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newSlowStore(t)
		s, err := fallback.New(st, fallback.Config{Logger: discard, Policy: fallback.Deny})
		if err != nil {
			t.Fatal(err)
		}
		st.stall()
		if v, _ := limiter.Consume(ctx(), s, "k", minute); v.Allowed {
			t.Fatal("allowed under Deny")
		}
		closed := make(chan error, 1)
		go func() { closed <- s.Close(ctx()) }()
		settled()
		select {
		case err := <-closed:
			t.Fatalf("Close returned %v while a call was under way", err)
		default:
		}
		if _, err := limiter.Consume(ctx(), s, "k", minute); !errors.Is(err, limiter.ErrClosed) {
			t.Errorf("call during Close: %v, want ErrClosed", err)
		}
		st.resume()
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if got := st.Events(); got != "consume,release,close" {
			t.Errorf("events %q, want consume,release,close", got)
		}
	})
}

// Close gives up waiting at its context's deadline, and still closes.
func TestCloseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newSlowStore(t)
		s, err := fallback.New(st, fallback.Config{Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		st.stall()
		limiter.Consume(ctx(), s, "k", minute)
		cctx, cancel := context.WithTimeout(ctx(), time.Second)
		defer cancel()
		if err := s.Close(cctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close = %v, want DeadlineExceeded", err)
		}
		if got := st.Events(); got != "close" {
			t.Errorf("events %q, want close", got)
		}
		st.resume()
		settled()
	})
}

// Peek under each policy records nothing anywhere.
func TestPeekOnStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newSlowStore(t)
		s, err := fallback.New(st, fallback.Config{Logger: discard, Policy: fallback.Local, KeepStoreOpen: true})
		if err != nil {
			t.Fatal(err)
		}
		st.stall()
		for range 5 {
			v, err := limiter.Peek(ctx(), s, "k", minute)
			if err != nil || !v.Allowed || v.Remaining != 2 || !fallback.IsLocal(v.Failure) {
				t.Fatalf("peek: %+v, %v", v, err)
			}
		}
		st.resume()
		settled()
		if r := st.remaining(t, "k", minute); r != 2 {
			t.Errorf("remaining %d, want 2", r)
		}
		s.Close(ctx())
	})
}
