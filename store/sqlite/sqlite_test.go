package sqlite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/limiter/storetest"
	"github.com/ringlimit/ringlimit/store/internal/sqlstore/sqltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.Path == "" {
		cfg.Path = filepath.Join(t.TempDir(), "limits.db")
	}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

type sizer struct{ *Store }

func (s sizer) Len() int {
	n, err := s.Store.Len(context.Background())
	if err != nil {
		panic(err)
	}
	return int(n)
}

func (s sizer) Sweep() {
	if _, err := s.Store.Sweep(context.Background()); err != nil {
		panic(err)
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) limiter.Store {
		return sizer{newStore(t, Config{SweepInterval: -1})}
	})
}

func TestVectors(t *testing.T) {
	s := newStore(t, Config{SweepInterval: -1})
	sqltest.Vectors(t, s, s.engine.PinClock)
	sqltest.SlotVectors(t, s, s.engine.PinClock)
}

// A token bucket's release after a move gives back only its call's own
// tokens (limiter.BucketMoves), on the pinned clock.
func TestBucketMoves(t *testing.T) {
	s := newStore(t, Config{SweepInterval: -1})
	sqltest.BucketMoves(t, s, s.engine.PinClock)
}

func TestSameAsMemory(t *testing.T) {
	s := newStore(t, Config{SweepInterval: -1})
	sqltest.Differential(t, s, s.engine.PinClock, 3, 150)
}

// Config.Clock is honoured: with a fake clock the store needs no pin.
func TestFakeClock(t *testing.T) {
	clock := limiter.NewFakeClock(time.Unix(1_800_000_000, 0))
	s := newStore(t, Config{Clock: clock, SweepInterval: -1})
	ctx := context.Background()
	l := limiter.Limit{Uses: 1, Window: time.Hour}
	if v, _ := limiter.Consume(ctx, s, "k", l); !v.Allowed {
		t.Fatal("first use refused")
	}
	v, err := limiter.Consume(ctx, s, "k", l)
	if err != nil || v.Allowed || v.RetryAfter != time.Hour || !v.RetryAt.Equal(time.Unix(1_800_003_600, 0)) {
		t.Fatalf("second use: %+v, %v; want refused for exactly an hour", v, err)
	}
	clock.Advance(time.Hour)
	if v, _ := limiter.Consume(ctx, s, "k", l); !v.Allowed {
		t.Fatal("use after an hour refused")
	}
}

func TestConfig(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "Path"},
		{Config{Path: dir + "/a?b"}, "Path"},
		{Config{Path: dir + "/x.db", Table: "no-dash"}, "Table"},
		{Config{Path: dir + "/x.db", Table: strings.Repeat("t", 49)}, "Table"},
		{Config{Path: dir + "/x.db", BusyTimeout: -1}, "BusyTimeout"},
		{Config{Path: dir + "/x.db", Synchronous: "sometimes"}, "Synchronous"},
		{Config{Path: dir + "/x.db", Bounds: limiter.Bounds{MaxKeys: 1}}, "Bounds.MaxKeys"},
	} {
		_, err := New(context.Background(), c.cfg)
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("New(%+v) = %v, want an *limiter.InputError naming %s", c.cfg, err, c.field)
		}
	}
	if _, err := New(context.Background(), Config{Path: filepath.Join(dir, "missing-dir", "x.db")}); err == nil {
		t.Error("New in a directory that does not exist succeeded")
	}
}

func TestClosed(t *testing.T) {
	s := newStore(t, Config{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err := limiter.Consume(context.Background(), s, "k", limiter.Limit{Uses: 1, Window: time.Second})
	if !errors.Is(err, limiter.ErrClosed) {
		t.Fatalf("Consume after Close: %v, want ErrClosed", err)
	}
}

// The background sweeper removes rows of keys no longer used.
func TestSweeper(t *testing.T) {
	s := newStore(t, Config{SweepInterval: 20 * time.Millisecond})
	ctx := context.Background()
	for _, alg := range []limiter.Algorithm{limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket} {
		if _, err := limiter.Consume(ctx, s, "k", limiter.Limit{Algorithm: alg, Uses: 3, Window: 30 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := s.Len(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var uses int
		if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM "+s.text.Table+"_log").Scan(&uses); err != nil {
			t.Fatal(err)
		}
		if n == 0 && uses == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d counters and %d log rows left; the sweeper should have removed them", n, uses)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two OS processes consume the same keys on one file at once; the limit
// holds exactly. The test binary runs itself as the children.
func TestTwoProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	newStore(t, Config{Path: path, SweepInterval: -1}).Close() // schema first
	// Each child tries 40 times per algorithm against a shared limit of 50:
	// neither can take all 50 alone, so the exact total needs both.
	const procs, attempts = 2, 40
	start := time.Now().Add(time.Second).UnixNano() // both children begin at this instant
	outs := make([]string, procs)
	var wg sync.WaitGroup
	for p := range procs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), "RINGLIMIT_SQLITE_CHILD="+path, fmt.Sprintf("RINGLIMIT_SQLITE_START=%d", start),
				fmt.Sprintf("RINGLIMIT_SQLITE_ATTEMPTS=%d", attempts))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("child %d: %v\n%s", p, err, out)
			}
			outs[p] = string(out)
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	total := map[string]int{}
	for p, out := range outs {
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			alg, n, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "allowed "), " ")
			if !ok || !strings.HasPrefix(sc.Text(), "allowed ") {
				continue
			}
			k, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("child %d said %q", p, sc.Text())
			}
			total[alg] += k
		}
		t.Logf("child %d: %s", p, strings.ReplaceAll(strings.TrimSpace(out), "\n", "; "))
	}
	for _, alg := range []string{"sliding-log", "sliding-window", "token-bucket"} {
		if total[alg] != childUses {
			t.Errorf("%s: the two processes were allowed %d uses in all, want exactly %d", alg, total[alg], childUses)
		}
	}
}

// childUses is the limit the children share: 50 per 1000 hours (a window
// so long that no use leaves it, and no token refills, during the test).
const childUses = 50

// TestHelperProcess is the child of TestTwoProcesses; run alone it does
// nothing.
func TestHelperProcess(t *testing.T) {
	path := os.Getenv("RINGLIMIT_SQLITE_CHILD")
	if path == "" {
		return
	}
	start, _ := strconv.ParseInt(os.Getenv("RINGLIMIT_SQLITE_START"), 10, 64)
	attempts, _ := strconv.Atoi(os.Getenv("RINGLIMIT_SQLITE_ATTEMPTS"))
	s, err := New(context.Background(), Config{Path: path, SkipMigrate: true, SweepInterval: -1, BusyTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	time.Sleep(time.Until(time.Unix(0, start)))
	for _, alg := range []limiter.Algorithm{limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket} {
		l := limiter.Limit{Algorithm: alg, Uses: childUses, Window: 1000 * time.Hour}
		allowed := 0
		var wg sync.WaitGroup
		var mu sync.Mutex
		for g := range 4 { // several goroutines per process, too
			wg.Go(func() {
				for i := g; i < attempts; i += 4 {
					v, err := limiter.Consume(context.Background(), s, "shared", l)
					if err != nil {
						t.Error(err)
						return
					}
					if v.Allowed {
						mu.Lock()
						allowed++
						mu.Unlock()
					}
					// Let go for a moment, so the other process (whose
					// busy handler sleeps while it waits) gets turns.
					time.Sleep(2 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		fmt.Printf("allowed %v %d\n", alg, allowed)
	}
}

func BenchmarkConsume(b *testing.B) {
	sqltest.Bench(b, newStore(b, Config{SweepInterval: -1}))
}
