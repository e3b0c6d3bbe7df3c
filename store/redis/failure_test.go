package redis

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/limiter"
)

// A SCRIPT FLUSH mid-run is survived: EVALSHA answers NOSCRIPT, the store
// sends the full script once, and counting goes on where it was.
func TestScriptFlushSurvived(t *testing.T) {
	client := singleClient(t)
	s := newStore(t, client, Config{})
	var noscript, full atomic.Int64
	sha, eval := s.cfg.EvalSHA, s.cfg.Eval
	s.cfg.EvalSHA = func(ctx context.Context, h string, keys []string, args []any) (any, error) {
		res, err := sha(ctx, h, keys, args)
		if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
			noscript.Add(1)
		}
		return res, err
	}
	s.cfg.Eval = func(ctx context.Context, src string, keys []string, args []any) (any, error) {
		full.Add(1)
		return eval(ctx, src, keys, args)
	}
	ctx := context.Background()
	l := limiter.Limit{Uses: 3, Window: time.Minute}
	mustConsume(t, s, "k", l, true)
	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
	mustConsume(t, s, "k", l, true)
	mustConsume(t, s, "k", l, true)
	mustConsume(t, s, "k", l, false) // the count survived the flush
	if noscript.Load() < 1 || full.Load() < 1 {
		t.Fatalf("after SCRIPT FLUSH: %d NOSCRIPT answers and %d full sends, want at least 1 each", noscript.Load(), full.Load())
	}
	if full.Load() > noscript.Load() {
		t.Fatalf("%d full sends for %d NOSCRIPT answers: the script is sent in full only on NOSCRIPT", full.Load(), noscript.Load())
	}
}

func mustConsume(t *testing.T, s *Store, key string, l limiter.Limit, allowed bool) limiter.Verdict {
	t.Helper()
	v, err := s.ConsumeMany(context.Background(), []limiter.Entry{{Key: key, Limit: l}})
	if err != nil {
		t.Fatalf("ConsumeMany(%q): %v", key, err)
	}
	if v.Allowed != allowed {
		t.Fatalf("ConsumeMany(%q): Allowed %v, want %v (%+v)", key, v.Allowed, allowed, v)
	}
	return v
}

// A stopped Redis makes every call fail at once as a store error
// (ErrUnavailable), never hang: the client dials with the store's timeout
// and queues nothing.
func TestStoppedRedisFailsFast(t *testing.T) {
	addr, stop := testenv.RedisServer(t)
	s, err := Open("redis://"+addr, Config{Timeout: 300 * time.Millisecond, Secret: testSecret, Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	l := limiter.Limit{Uses: 5, Window: time.Minute}
	mustConsume(t, s, "k", l, true)
	stop()
	for i := 0; i < 3; i++ {
		start := time.Now()
		_, err := s.ConsumeMany(context.Background(), []limiter.Entry{{Key: "k", Limit: l}})
		took := time.Since(start)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d with Redis stopped: error %v, want one matching ErrUnavailable", i, err)
		}
		// Not a performance assertion: a call that hangs would take far
		// longer than the timeout (go-redis's defaults are 5 s and retries).
		if took > 2*time.Second {
			t.Fatalf("call %d with Redis stopped took %v, want it to fail within the 300ms timeout", i, took)
		}
	}
}

// A server that stops answering after the store connected (a hung Redis,
// a black-holed network): each call ends with ErrUnavailable at the
// timeout.
func TestUnresponsiveRedisTimesOut(t *testing.T) {
	f := newFreezer(t, hostPort(t))
	s, err := Open("redis://"+f.addr(), Config{Timeout: 200 * time.Millisecond, Secret: testSecret, Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	f.frozen.Store(true)
	start := time.Now()
	_, err = s.ConsumeMany(context.Background(), []limiter.Entry{{Key: "k", Limit: limiter.Limit{Uses: 1, Window: time.Second}}})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error %v, want one matching ErrUnavailable", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("the call took %v with a 200ms timeout: it hung", took)
	}
}

// Closed stores refuse calls with limiter.ErrClosed.
func TestClosed(t *testing.T) {
	s := newStore(t, singleClient(t), Config{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := s.ConsumeMany(context.Background(), []limiter.Entry{{Key: "k", Limit: limiter.Limit{Uses: 1, Window: time.Second}}})
	if !errors.Is(err, limiter.ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}
