package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/limiter/storetest"
)

// ctxStore keeps to its context: it stalls until the context ends while
// stalled is set, like a router waiting on an owner that does not answer.
type ctxStore struct {
	*limiter.Memory
	stalled bool
	timeout time.Duration
	err     error
}

func (s *ctxStore) ConsumeMany(ctx context.Context, es []limiter.Entry) (limiter.Verdict, error) {
	if s.err != nil {
		return limiter.Verdict{}, s.err
	}
	if s.stalled {
		// Like the router: it bounds its own wait.
		select {
		case <-ctx.Done():
			return limiter.Verdict{}, ctx.Err()
		case <-time.After(s.timeout):
			return limiter.Verdict{}, fmt.Errorf("owner did not answer: %w", context.DeadlineExceeded)
		}
	}
	return s.Memory.ConsumeMany(ctx, es)
}

func TestInlineConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) limiter.Store {
		m := limiter.NewMemory(limiter.MemoryConfig{})
		s, err := fallback.New(&ctxStore{Memory: m}, fallback.Config{Inline: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		return s
	})
}

func TestInlinePolicies(t *testing.T) {
	l := limiter.Limit{Uses: 2, Window: time.Minute}
	for _, c := range []struct {
		policy  fallback.Policy
		allowed bool
	}{{fallback.Deny, false}, {fallback.Allow, true}, {fallback.Local, true}} {
		for _, stall := range []bool{true, false} {
			m := limiter.NewMemory(limiter.MemoryConfig{})
			inner := &ctxStore{Memory: m, stalled: stall, timeout: 20 * time.Millisecond}
			if !stall {
				inner.err = errors.New("connection refused")
			}
			s, err := fallback.New(inner, fallback.Config{Inline: true, Policy: c.policy, Timeout: 20 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			v, err := limiter.Consume(context.Background(), s, "k", l)
			var fe *fallback.FailureError
			if err != nil || v.Allowed != c.allowed || !errors.As(v.Failure, &fe) || fe.Policy != c.policy {
				t.Fatalf("%v, stalled %v: %+v %v; want allowed %v with a FailureError", c.policy, stall, v, err, c.allowed)
			}
			if stall != errors.Is(v.Failure, fallback.ErrTimeout) {
				t.Fatalf("%v, stalled %v: failure %v; ErrTimeout iff stalled", c.policy, stall, v.Failure)
			}
			// A caller that gives up gets its own context's error, no policy.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := limiter.Consume(ctx, s, "k", l); !errors.Is(err, context.Canceled) {
				t.Fatalf("%v: cancelled caller got %v, want context.Canceled", c.policy, err)
			}
			// Bad input is the caller's error, never a policy verdict.
			if _, err := limiter.Consume(context.Background(), s, "", l); !errors.Is(err, limiter.ErrInvalid) {
				t.Fatalf("%v: empty key got %v, want ErrInvalid", c.policy, err)
			}
			s.Close(context.Background())
			m.Close()
		}
	}
}

// callsStore is a ctxStore that decides batches itself (limiter.CallsStore),
// one by one, and keeps the keys of the calls it was given.
type callsStore struct {
	*ctxStore
	got []string
}

func (s *callsStore) Calls(ctx context.Context, calls []limiter.Call, out []limiter.CallResult) {
	for i, c := range calls {
		s.got = append(s.got, c.Entries[0].Key)
		out[i] = limiter.OneCall(ctx, s.ctxStore, c)
	}
}

// A batch's calls out of bounds are answered with their error where they
// stand, and only the others reach the wrapped store, each answer in its
// own call's place.
func TestInlineCallsOutOfBounds(t *testing.T) {
	inner := &callsStore{ctxStore: &ctxStore{Memory: limiter.NewMemory(limiter.MemoryConfig{})}}
	defer inner.Memory.Close()
	s, err := fallback.New(inner, fallback.Config{Inline: true, Bounds: limiter.Bounds{MaxKeyBytes: 8}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	lim := limiter.Limit{Uses: 1, Window: time.Minute}
	call := func(k string) limiter.Call { return limiter.Call{Entries: []limiter.Entry{{Key: k, Limit: lim}}} }
	for _, keys := range [][]string{
		{"a", "too-long-key", "b", "c", "longer-still"},
		{"g", "h", "i", "too-long-key", "j"},
		{"too-long-key", "d"},
		{"e", "f"},
	} {
		inner.got = nil
		calls := make([]limiter.Call, len(keys))
		var want []string
		for i, k := range keys {
			calls[i] = call(k)
			if len(k) <= 8 {
				want = append(want, k)
			}
		}
		out := make([]limiter.CallResult, len(calls))
		s.Calls(context.Background(), calls, out)
		for i, k := range keys {
			if len(k) > 8 {
				if !errors.Is(out[i].Err, limiter.ErrInvalid) {
					t.Errorf("%v: call %d (%s): %v; want an input error", keys, i, k, out[i].Err)
				}
				continue
			}
			if out[i].Err != nil || !out[i].Verdict.Allowed {
				t.Errorf("%v: call %d (%s): %+v, %v; want allowed", keys, i, k, out[i].Verdict, out[i].Err)
			}
		}
		if fmt.Sprint(inner.got) != fmt.Sprint(want) {
			t.Errorf("%v: the wrapped store decided %v; want %v", keys, inner.got, want)
		}
	}
}
