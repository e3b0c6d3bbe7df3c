package ringlimit_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
)

// freeAddr returns a 127.0.0.1 address nothing listens on (for now).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startUnjoined starts a node whose only seed is not up, so it stays
// unready while the test calls it.
func startUnjoined(t *testing.T, seedAddr string, policy fallback.Policy) *ringlimit.Node {
	t.Helper()
	cfg := nodeConfig("late")
	cfg.Join, cfg.Timeout, cfg.JoinTimeout = []string{seedAddr}, 200*time.Millisecond, 20*time.Second
	cfg.Fallback, cfg.FallbackSet = policy, true
	n, err := ringlimit.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Close(ctx)
	})
	return n
}

// A call made before the node has joined waits for it at most Timeout,
// then meets the failure policy, as an owner that did not answer does:
// deny refuses (Failure set, its cause ErrNotReady), allow lets it
// through, local counts it in this process. Once the node has joined, a
// call is answered by the cluster.
func TestCallsBeforeJoinMeetThePolicy(t *testing.T) {
	limit := limiter.Limit{Uses: 1, Window: time.Minute}
	one := []limiter.Entry{{Key: "early", Limit: limit}}
	// before makes one call on an unjoined node and checks the wait and
	// the failure's cause.
	before := func(t *testing.T, n *ringlimit.Node) limiter.Verdict {
		t.Helper()
		start := time.Now()
		v, err := n.ConsumeMany(context.Background(), one)
		if err != nil {
			t.Fatalf("a call before the join: error %v, want the policy's verdict", err)
		}
		if waited := time.Since(start); waited < 200*time.Millisecond {
			t.Fatalf("the call returned after %v, before waiting its Timeout of 200ms", waited)
		}
		if !errors.Is(v.Failure, ringlimit.ErrNotReady) {
			t.Fatalf("a call before the join: %+v, want a Failure caused by ErrNotReady", v)
		}
		return v
	}
	t.Run("deny", func(t *testing.T) {
		t.Parallel()
		seedAddr := freeAddr(t)
		n := startUnjoined(t, seedAddr, fallback.Deny)
		if v := before(t, n); v.Allowed {
			t.Fatalf("deny let a call before the join through: %+v", v)
		}
		if v, err := n.PeekMany(context.Background(), one); err != nil || v.Allowed || !errors.Is(v.Failure, ringlimit.ErrNotReady) {
			t.Fatalf("a peek before the join: %+v %v, want deny's refusal", v, err)
		}
		code, body := httpStatus(t, "POST", "http://"+n.HTTPAddr()+"/v1/consume", "", `{"entries":[{"key":"early","limit":"1/1m"}]}`)
		if code != 503 || !strings.Contains(body, "correlation_id") {
			t.Fatalf("the JSON API before the join: %d %s, want deny's 503 with a correlation id", code, body)
		}
		// The seed comes up at that address; the late node's join
		// retries reach it, and calls are answered by the cluster.
		seed := nodeConfig("seed")
		seed.GossipAddr = seedAddr
		s, err := ringlimit.Start(context.Background(), seed)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s.Close(ctx)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := n.WaitReady(ctx); err != nil {
			t.Fatalf("the late node did not join once its seed was up: %v", err)
		}
		if v, err := n.ConsumeMany(context.Background(), one); err != nil || !v.Allowed || v.Failure != nil {
			t.Fatalf("after the join: %+v %v, want counted by the cluster", v, err)
		}
	})
	t.Run("allow", func(t *testing.T) {
		t.Parallel()
		n := startUnjoined(t, freeAddr(t), fallback.Allow)
		for i := range 2 {
			if v := before(t, n); !v.Allowed {
				t.Fatalf("call %d: allow refused a call before the join: %+v", i+1, v)
			}
		}
	})
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		n := startUnjoined(t, freeAddr(t), fallback.Local)
		if v := before(t, n); !v.Allowed || !fallback.IsLocal(v.Failure) {
			t.Fatalf("call 1: local did not count the call here: %+v", v)
		}
		if v := before(t, n); v.Allowed || !fallback.IsLocal(v.Failure) || v.RetryAfter <= 0 {
			t.Fatalf("call 2: local let a second use of a 1/1m limit through, or refused it without a wait: %+v", v)
		}
	})
}
