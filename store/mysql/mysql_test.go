package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/limiter/storetest"
	"github.com/ringlimit/ringlimit/store/internal/sqlstore/sqltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newDB returns a handle on a database of this test's own (dropped at
// cleanup).
func newDB(t testing.TB, maxConns int) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { db.Close() })
	return db
}

var tables atomic.Int64

func newStore(t testing.TB, db *sql.DB, cfg Config) *Store {
	t.Helper()
	cfg.DB = db
	if cfg.Table == "" {
		cfg.Table = fmt.Sprintf("rl_%d", tables.Add(1))
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
	db := newDB(t, 32)
	storetest.Run(t, func(t *testing.T) limiter.Store {
		return sizer{newStore(t, db, Config{SweepInterval: -1})}
	})
}

func TestVectors(t *testing.T) {
	s := newStore(t, newDB(t, 4), Config{SweepInterval: -1})
	sqltest.Vectors(t, s, s.engine.PinClock)
	sqltest.SlotVectors(t, s, s.engine.PinClock)
}

// A token bucket's release after a move gives back only its call's own
// tokens (limiter.BucketMoves), on the pinned clock.
func TestBucketMoves(t *testing.T) {
	s := newStore(t, newDB(t, 4), Config{SweepInterval: -1})
	sqltest.BucketMoves(t, s, s.engine.PinClock)
}

func TestSameAsMemory(t *testing.T) {
	s := newStore(t, newDB(t, 4), Config{SweepInterval: -1})
	sqltest.Differential(t, s, s.engine.PinClock, 3, 150)
}

func TestConfig(t *testing.T) {
	db := newDB(t, 2)
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "DB"},
		{Config{DB: db, Table: "bad name"}, "Table"},
		{Config{DB: db, Table: "t`x"}, "Table"},
		{Config{DB: db, Table: "t", Bounds: limiter.Bounds{MaxKeyBytes: 4096}}, "Bounds.MaxKeyBytes"},
		{Config{DB: db, Table: "t", Bounds: limiter.Bounds{MaxKeys: 10}}, "Bounds.MaxKeys"},
	} {
		_, err := New(context.Background(), c.cfg)
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != c.field || !errors.Is(err, limiter.ErrInvalid) {
			t.Errorf("New(%+v) = %v, want an *limiter.InputError naming %s", c.cfg, err, c.field)
		}
	}
}

func TestMigrate(t *testing.T) {
	db := newDB(t, 8)
	ctx := context.Background()
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- Migrate(ctx, db, Config{Table: "mine"}) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	s := newStore(t, db, Config{Table: "mine", SkipMigrate: true, SweepInterval: -1})
	key := "k\x00\xff" // opaque bytes
	v, err := limiter.Consume(ctx, s, key, limiter.Limit{Uses: 1, Window: time.Second})
	if err != nil || !v.Allowed {
		t.Fatalf("Consume on a migrated table: %+v, %v", v, err)
	}
	var got []byte
	if err := db.QueryRowContext(ctx, "SELECT ckey FROM mine_log").Scan(&got); err != nil || string(got) != key {
		t.Fatalf("mine_log holds key %q (%v), want %q", got, err, key)
	}
}

// The background sweeper removes expired rows, including the lock rows a
// refused batch left for keys it never recorded.
func TestSweeper(t *testing.T) {
	db := newDB(t, 4)
	ctx := context.Background()
	s := newStore(t, db, Config{SweepInterval: 20 * time.Millisecond})
	short := limiter.Limit{Uses: 1, Window: 30 * time.Millisecond}
	long := limiter.Limit{Uses: 1, Window: time.Hour}
	if _, err := limiter.Consume(ctx, s, "spent", long); err != nil {
		t.Fatal(err)
	}
	for _, alg := range []limiter.Algorithm{limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket} {
		l := short
		l.Algorithm = alg
		if _, err := limiter.Consume(ctx, s, "k", l); err != nil {
			t.Fatal(err)
		}
		v, err := s.ConsumeMany(ctx, []limiter.Entry{{Key: "fresh-" + alg.String(), Limit: l}, {Key: "spent", Limit: long}})
		if err != nil || v.Allowed {
			t.Fatalf("batch with a spent key: %+v, %v", v, err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := s.Len(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 { // "spent" stays for its hour
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d counters left, want 1; the sweeper should have removed the rest", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestClosed(t *testing.T) {
	s := newStore(t, newDB(t, 2), Config{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	_, err := limiter.Consume(context.Background(), s, "k", limiter.Limit{Uses: 1, Window: time.Second})
	if !errors.Is(err, limiter.ErrClosed) {
		t.Fatalf("Consume after Close: %v, want ErrClosed", err)
	}
}

// A database error comes back wrapped, and the store works again once the
// cause is gone.
func TestDatabaseError(t *testing.T) {
	db := newDB(t, 2)
	ctx := context.Background()
	s := newStore(t, db, Config{SweepInterval: -1})
	if _, err := db.ExecContext(ctx, "DROP TABLE "+s.text.Table+"_log"); err != nil {
		t.Fatal(err)
	}
	if _, err := limiter.Consume(ctx, s, "k", limiter.Limit{Uses: 1, Window: time.Second}); err == nil {
		t.Fatal("Consume with the log table dropped succeeded")
	}
	if err := Migrate(ctx, db, Config{Table: s.text.Table}); err != nil {
		t.Fatal(err)
	}
	v, err := limiter.Consume(ctx, s, "k", limiter.Limit{Uses: 1, Window: time.Second})
	if err != nil || !v.Allowed {
		t.Fatalf("after the table came back: %+v, %v", v, err)
	}
}

func BenchmarkConsume(b *testing.B) {
	s := newStore(b, newDB(b, 32), Config{SweepInterval: -1})
	sqltest.Bench(b, s)
}
