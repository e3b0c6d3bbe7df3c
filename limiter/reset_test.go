package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// A store without Reset answers with an *UnsupportedError naming it, and
// a wrapper passes that through rather than hide which store lacked it.
func TestResetUnsupportedNamesTheStore(t *testing.T) {
	kbk, err := limiter.NewKeyByKey(func(ctx context.Context, e limiter.Entry) (limiter.Verdict, error) {
		return limiter.Verdict{Allowed: true}, nil
	}, limiter.KeyByKeyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l := limiter.Limit{Uses: 1, Window: time.Minute}
	for _, s := range []limiter.Store{kbk, limiter.Shadow(kbk)} {
		err := limiter.Reset(context.Background(), s, []string{"k"}, l)
		var ue *limiter.UnsupportedError
		if !errors.As(err, &ue) || !errors.Is(err, limiter.ErrUnsupported) || ue.Store != "*limiter.KeyByKey" || ue.Op != "reset" {
			t.Fatalf("Reset on %T: %v, want an *UnsupportedError naming *limiter.KeyByKey", s, err)
		}
		if !strings.Contains(err.Error(), "*limiter.KeyByKey cannot reset") {
			t.Fatalf("message %q does not say which store cannot reset", err)
		}
	}
	if err := limiter.Reset(context.Background(), nil, []string{"k"}); !errors.Is(err, limiter.ErrInvalid) {
		t.Fatalf("Reset on a nil store: %v, want ErrInvalid", err)
	}
}

// Shadow mode passes a reset to its store.
func TestShadowResets(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryConfig{})
	defer m.Close()
	ctx := context.Background()
	l := limiter.Limit{Uses: 1, Window: time.Minute}
	if _, err := limiter.Consume(ctx, m, "k", l); err != nil {
		t.Fatal(err)
	}
	if err := limiter.Reset(ctx, limiter.Shadow(m), []string{"k"}); err != nil {
		t.Fatal(err)
	}
	if v, _ := limiter.Peek(ctx, m, "k", l); !v.Allowed {
		t.Fatal("the store behind shadow mode still counts the key after a reset")
	}
	if m.Len() != 0 {
		t.Fatalf("Len %d after the reset, want 0 (the key budget follows deletions)", m.Len())
	}
}

// An operator unlocks a user who ran out of login attempts.
func ExampleReset() {
	store := limiter.NewMemory(limiter.MemoryConfig{})
	defer store.Close()
	ctx := context.Background()
	login, _ := limiter.ParseLimit("3/15m")
	for range 3 {
		limiter.Consume(ctx, store, "login:ann", login)
	}
	v, _ := limiter.Consume(ctx, store, "login:ann", login)
	fmt.Println("fourth attempt allowed:", v.Allowed)

	// Forget the login counter (or, with no limit, every counter of the key).
	if err := limiter.Reset(ctx, store, []string{"login:ann"}, login); err != nil {
		panic(err)
	}
	v, _ = limiter.Consume(ctx, store, "login:ann", login)
	fmt.Println("after the reset:", v.Allowed, v.Remaining, "left")
	// Output:
	// fourth attempt allowed: false
	// after the reset: true 2 left
}

// A receipt recorded before a reset gives nothing back after it: the
// reset already gave its uses back, and window and bucket counters keep no
// calls, so given to the counter that started after the reset it would
// return uses of later calls (over-admission by its cost). A receipt of a
// call after the reset still gives its own back; a sliding log's never
// mattered (a log removes its call by id). With the reset marks removed,
// the window and bucket cases fail.
func TestReleaseAfterResetGivesNothingBack(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		alg   limiter.Algorithm
		named bool // Reset names the limit; else every counter of the key
	}{
		{limiter.SlidingWindow, true}, {limiter.FixedWindow, true}, {limiter.TokenBucket, true}, {limiter.SlidingLog, true},
		{limiter.SlidingWindow, false}, {limiter.FixedWindow, false}, {limiter.TokenBucket, false},
	} {
		alg := c.alg
		t.Run(fmt.Sprintf("%s/named=%v", alg, c.named), func(t *testing.T) {
			clock := limiter.NewFakeClock(time.Unix(1_700_000_000, 0))
			m := limiter.NewMemory(limiter.MemoryConfig{Clock: clock})
			defer m.Close()
			l := limiter.Limit{Algorithm: alg, Uses: 10, Window: time.Minute}
			e := []limiter.Entry{{Key: "user", Limit: l}}
			consume := func() limiter.Verdict {
				t.Helper()
				v, err := m.ConsumeMany(limiter.WithRelease(ctx), e)
				if err != nil || !v.Allowed {
					t.Fatalf("consume: %+v, %v", v, err)
				}
				clock.Advance(time.Millisecond)
				return v
			}
			left := func() int64 {
				t.Helper()
				v, err := m.PeekMany(ctx, e)
				if err != nil {
					t.Fatal(err)
				}
				return v.Remaining
			}
			// The receipt released is the latest before the reset: a
			// bucket's remove gives back what of a call lies past the
			// arrival time, so an old call early in the bucket's line would
			// lie under the calls after the reset.
			consume()
			old := consume()
			limits := []limiter.Limit{l}
			if !c.named {
				limits = nil
			}
			if err := m.Reset(ctx, []string{"user"}, limits...); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Millisecond)
			consume()
			consume()
			consume()
			want := left()
			if err := old.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if got := left(); got != want {
				t.Fatalf("a pre-reset receipt's release left %d uses, want %d: it gave back a later call's", got, want)
			}
			// A post-reset call's own receipt still gives it back.
			v := consume()
			if err := v.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if got := left(); got != want {
				t.Fatalf("a post-reset receipt's release left %d uses, want %d", got, want)
			}
		})
	}
}
