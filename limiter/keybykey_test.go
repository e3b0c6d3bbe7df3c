package limiter_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// oneKey is a store of one's own as KeyByKey sees it: a Memory asked one
// entry at a time, recording which keys it was asked for.
type oneKey struct {
	mem       *limiter.Memory
	mu        sync.Mutex
	asked     []string
	noRelease bool  // the function gives no Release
	failGive  error // its Release fails with this
}

func newOneKey(t *testing.T) (*oneKey, *limiter.FakeClock) {
	clk := limiter.NewFakeClock(time.Unix(1_700_000_000, 0))
	mem := limiter.NewMemory(limiter.MemoryConfig{Clock: clk})
	t.Cleanup(func() { mem.Close() })
	return &oneKey{mem: mem}, clk
}

func (o *oneKey) consume(ctx context.Context, e limiter.Entry) (limiter.Verdict, error) {
	o.mu.Lock()
	o.asked = append(o.asked, e.Key)
	o.mu.Unlock()
	v, err := o.mem.ConsumeMany(ctx, []limiter.Entry{e})
	switch {
	case o.noRelease:
		v.Release = nil
	case o.failGive != nil && v.Release != nil:
		v.Release = func(context.Context) error { return o.failGive }
	}
	return v, err
}

func (o *oneKey) peek(ctx context.Context, e limiter.Entry) (limiter.Verdict, error) {
	return o.mem.PeekMany(ctx, []limiter.Entry{e})
}

// left is how many uses key has left under l, peeked on the memory itself
// (a peek's Remaining is what a use would leave).
func (o *oneKey) left(t *testing.T, key string, l limiter.Limit) int64 {
	t.Helper()
	v, err := limiter.Peek(context.Background(), o.mem, key, l)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Allowed {
		return 0
	}
	return v.Remaining + 1
}

func newKBK(t *testing.T, o *oneKey, cfg limiter.KeyByKeyConfig) *limiter.KeyByKey {
	t.Helper()
	s, err := limiter.NewKeyByKey(o.consume, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	kbkOne   = limiter.Limit{Uses: 1, Window: time.Minute}
	kbkThree = limiter.Limit{Uses: 3, Window: time.Minute}
)

// The entries are consumed in order and the first refusal stops the
// batch: the entries after it are never asked, and the uses counted
// before it are given back, so the refused batch counts against none.
func TestKeyByKeyStopsAtFirstRefusalAndGivesBack(t *testing.T) {
	o, clk := newOneKey(t)
	s := newKBK(t, o, limiter.KeyByKeyConfig{})
	ctx := context.Background()
	if v, err := limiter.Consume(ctx, s, "b", kbkOne); err != nil || !v.Allowed {
		t.Fatalf("step 1: Consume(b) = %+v, %v; want allowed", v, err)
	}
	o.asked = nil
	batch := []limiter.Entry{{Key: "a", Limit: kbkThree}, {Key: "b", Limit: kbkOne}, {Key: "c", Limit: kbkThree}}
	v, err := s.ConsumeMany(ctx, batch)
	if err != nil || v.Allowed {
		t.Fatalf("step 2: ConsumeMany(a, b, c) = %+v, %v; want refused by b", v, err)
	}
	if got := strings.Join(o.asked, ","); got != "a,b" {
		t.Fatalf("step 2: the function was asked for %q, want a,b (in order, none after the refusal)", got)
	}
	if v.RetryAfter != time.Minute || !v.RetryAt.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("step 2: RetryAfter %v RetryAt %v, want b's wait: 1m, at %v", v.RetryAfter, v.RetryAt, clk.Now().Add(time.Minute))
	}
	if v.Remaining != 0 {
		t.Fatalf("step 2: Remaining %d, want 0 (b, the tightest)", v.Remaining)
	}
	if got := o.left(t, "a", kbkThree); got != 3 {
		t.Fatalf("step 3: a has %d uses left after the refused batch, want all 3 (its use given back)", got)
	}
	if got := o.left(t, "c", kbkThree); got != 3 {
		t.Fatalf("step 3: c has %d uses left, want 3 (never consumed)", got)
	}
}

// A function that gives no Release leaves the uses counted before a
// refusal, as one call per entry would: "given back where it can".
func TestKeyByKeyWithoutReleaseKeepsEarlierUses(t *testing.T) {
	o, _ := newOneKey(t)
	o.noRelease = true
	s := newKBK(t, o, limiter.KeyByKeyConfig{})
	ctx := context.Background()
	limiter.Consume(ctx, s, "b", kbkOne)
	v, err := s.ConsumeMany(ctx, []limiter.Entry{{Key: "a", Limit: kbkThree}, {Key: "b", Limit: kbkOne}})
	if err != nil || v.Allowed {
		t.Fatalf("ConsumeMany = %+v, %v; want refused", v, err)
	}
	if got := o.left(t, "a", kbkThree); got != 2 {
		t.Fatalf("a has %d uses left, want 2: nothing could give its use back", got)
	}
	if v.Remaining != 0 {
		t.Fatalf("Remaining %d, want 0", v.Remaining)
	}
}

// A give-back that fails is logged at Error level, and the refusal
// stands.
func TestKeyByKeyFailedGiveBackIsLogged(t *testing.T) {
	o, _ := newOneKey(t)
	var buf bytes.Buffer
	s := newKBK(t, o, limiter.KeyByKeyConfig{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	ctx := context.Background()
	limiter.Consume(ctx, s, "b", kbkOne)
	o.failGive = errors.New("connection reset")
	v, err := s.ConsumeMany(ctx, []limiter.Entry{{Key: "a", Limit: kbkThree}, {Key: "b", Limit: kbkOne}})
	if err != nil || v.Allowed {
		t.Fatalf("ConsumeMany = %+v, %v; want refused", v, err)
	}
	if log := buf.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "connection reset") {
		t.Fatalf("the failed give-back was not logged at Error: %q", log)
	}
}

// A store failure mid-batch gives back what was counted and returns the
// error.
func TestKeyByKeyErrorGivesBack(t *testing.T) {
	o, _ := newOneKey(t)
	boom := errors.New("database down")
	calls := 0
	s, err := limiter.NewKeyByKey(func(ctx context.Context, e limiter.Entry) (limiter.Verdict, error) {
		if calls++; calls == 2 {
			return limiter.Verdict{}, boom
		}
		return o.consume(ctx, e)
	}, limiter.KeyByKeyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.ConsumeMany(context.Background(), []limiter.Entry{{Key: "a", Limit: kbkThree}, {Key: "b", Limit: kbkThree}})
	if !errors.Is(err, boom) {
		t.Fatalf("ConsumeMany error %v, want the function's", err)
	}
	if got := o.left(t, "a", kbkThree); got != 3 {
		t.Fatalf("a has %d uses left after the failed batch, want 3", got)
	}
}

// An allowed batch counts every entry; its Release gives them all back,
// once.
func TestKeyByKeyAllowedAndRelease(t *testing.T) {
	o, clk := newOneKey(t)
	s := newKBK(t, o, limiter.KeyByKeyConfig{})
	ctx := limiter.WithRelease(context.Background())
	long := limiter.Limit{Uses: 5, Window: time.Hour}
	v, err := s.ConsumeMany(ctx, []limiter.Entry{{Key: "a", Limit: kbkThree, Cost: 2}, {Key: "b", Limit: long}})
	if err != nil || !v.Allowed {
		t.Fatalf("ConsumeMany = %+v, %v; want allowed", v, err)
	}
	if v.Remaining != 1 || !v.ResetAt.Equal(clk.Now().Add(time.Hour)) {
		t.Fatalf("Remaining %d ResetAt %v, want 1 (a) and b's reset %v", v.Remaining, v.ResetAt, clk.Now().Add(time.Hour))
	}
	if v.Release == nil {
		t.Fatal("no Release under WithRelease")
	}
	for range 2 {
		if err := v.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := o.left(t, "a", kbkThree), o.left(t, "b", long); a != 3 || b != 5 {
		t.Fatalf("after Release: a %d b %d left, want 3 and 5", a, b)
	}
	if v, _ := s.ConsumeMany(context.Background(), []limiter.Entry{{Key: "a", Limit: kbkThree}}); v.Release != nil {
		t.Fatal("Release set without WithRelease")
	}
}

// Without Peek, PeekMany allows everything, even a key the store would
// refuse; with Peek it answers what ConsumeMany would and names the
// longest wait. Peek also gives a refused ConsumeMany the longest wait of
// the entries after the refusing one.
func TestKeyByKeyPeek(t *testing.T) {
	o, clk := newOneKey(t)
	ctx := context.Background()
	hour := limiter.Limit{Uses: 1, Window: time.Hour}
	bare := newKBK(t, o, limiter.KeyByKeyConfig{})
	limiter.Consume(ctx, bare, "b", kbkOne)
	limiter.Consume(ctx, bare, "c", hour)
	batch := []limiter.Entry{{Key: "a", Limit: kbkThree}, {Key: "b", Limit: kbkOne}, {Key: "c", Limit: hour}}
	if v, err := bare.PeekMany(ctx, batch); err != nil || !v.Allowed {
		t.Fatalf("PeekMany without Peek = %+v, %v; want allowed (the default allows every call)", v, err)
	}
	peeking := newKBK(t, o, limiter.KeyByKeyConfig{Peek: o.peek})
	v, err := peeking.PeekMany(ctx, batch)
	if err != nil || v.Allowed || v.RetryAfter != time.Hour {
		t.Fatalf("PeekMany with Peek = %+v, %v; want refused with c's wait of 1h", v, err)
	}
	if got := o.left(t, "a", kbkThree); got != 3 {
		t.Fatalf("a has %d uses left after a peek, want 3", got)
	}
	v, err = peeking.ConsumeMany(ctx, batch)
	if err != nil || v.Allowed || v.RetryAfter != time.Hour || !v.RetryAt.Equal(clk.Now().Add(time.Hour)) {
		t.Fatalf("ConsumeMany with Peek = %+v, %v; want refused naming c's wait of 1h, the longest", v, err)
	}
}

// Bad input is refused before anything is counted.
func TestKeyByKeyInput(t *testing.T) {
	if _, err := limiter.NewKeyByKey(nil, limiter.KeyByKeyConfig{}); !errors.Is(err, limiter.ErrInvalid) {
		t.Fatalf("NewKeyByKey(nil) = %v, want an InputError", err)
	}
	o, _ := newOneKey(t)
	s := newKBK(t, o, limiter.KeyByKeyConfig{})
	_, err := s.ConsumeMany(context.Background(), []limiter.Entry{{Key: "a", Limit: kbkThree}, {Key: "", Limit: kbkThree}})
	var ie *limiter.InputError
	if !errors.As(err, &ie) || ie.Field != "entries[1].key" {
		t.Fatalf("ConsumeMany with an empty key = %v, want an InputError naming entries[1].key", err)
	}
	if len(o.asked) != 0 {
		t.Fatalf("the function was asked for %v before the batch was checked", o.asked)
	}
}

// Of concurrent single-entry calls at the limit exactly one passes, as the
// function decides each in one step.
func TestKeyByKeyConcurrentOne(t *testing.T) {
	o, _ := newOneKey(t)
	s := newKBK(t, o, limiter.KeyByKeyConfig{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	for range 20 {
		wg.Go(func() {
			if v, err := limiter.Consume(context.Background(), s, "k", kbkOne); err == nil && v.Allowed {
				mu.Lock()
				passed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if passed != 1 {
		t.Fatalf("%d of 20 concurrent calls at the limit passed, want 1", passed)
	}
}
