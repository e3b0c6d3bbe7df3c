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
