package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/limiter/storetest"
	"github.com/ringlimit/ringlimit/store/internal/sqlstore/sqltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newPool returns a pool on a database of this test's own (dropped at
// cleanup).
func newPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var tables atomic.Int64

// newStore returns a store on a table of its own in pool.
func newStore(t testing.TB, pool *pgxpool.Pool, cfg Config) *Store {
	t.Helper()
	cfg.Pool = pool
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

// sizer gives storetest the Len and Sweep it checks expiry with.
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
	pool := newPool(t, 16)
	for _, m := range modes[:2] { // AsyncCommit changes no logic: vectors and Memory check it
		t.Run(m.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) limiter.Store {
				cfg := m.cfg
				cfg.SweepInterval = -1
				return sizer{newStore(t, pool, cfg)}
			})
		})
	}
}

// modes are the store's configurations under test: both ways of running
// a call, with and without AsyncCommit.
var modes = []struct {
	name string
	cfg  Config
}{
	{"two-round-trips", Config{Mode: TwoRoundTrips}},
	{"one-round-trip", Config{Mode: OneRoundTrip}},
	{"one-round-trip-async", Config{Mode: OneRoundTrip, AsyncCommit: true}},
	{"two-round-trips-async", Config{Mode: TwoRoundTrips, AsyncCommit: true}},
}

func TestVectors(t *testing.T) {
	pool := newPool(t, 4)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cfg := m.cfg
			cfg.SweepInterval = -1
			s := newStore(t, pool, cfg)
			sqltest.Vectors(t, s, s.engine.PinClock)
			sqltest.SlotVectors(t, s, s.engine.PinClock)
		})
	}
}

// A token bucket's release after a move gives back only its call's own
// tokens (limiter.BucketMoves), on the pinned clock, in every mode (the
// function reads the record's stamp in one round trip).
func TestBucketMoves(t *testing.T) {
	pool := newPool(t, 4)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cfg := m.cfg
			cfg.SweepInterval = -1
			s := newStore(t, pool, cfg)
			sqltest.BucketMoves(t, s, s.engine.PinClock)
		})
	}
}

func TestSameAsMemory(t *testing.T) {
	pool := newPool(t, 4)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cfg := m.cfg
			cfg.SweepInterval = -1
			s := newStore(t, pool, cfg)
			sqltest.Differential(t, s, s.engine.PinClock, 3, 150)
		})
	}
}

func TestConfig(t *testing.T) {
	pool := newPool(t, 2)
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "Pool"},
		{Config{Pool: pool, Table: "bad-name"}, "Table"},
		{Config{Pool: pool, Table: "1abc"}, "Table"},
		{Config{Pool: pool, Table: "x; DROP TABLE y"}, "Table"},
		{Config{Pool: pool, Table: "t", Bounds: limiter.Bounds{MaxKeyBytes: 4096}}, "Bounds.MaxKeyBytes"},
		{Config{Pool: pool, Table: "t", Bounds: limiter.Bounds{MaxKeys: 10}}, "Bounds.MaxKeys"},
	} {
		_, err := New(context.Background(), c.cfg)
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != c.field || !errors.Is(err, limiter.ErrInvalid) {
			t.Errorf("New(%+v) = %v, want an *limiter.InputError naming %s", c.cfg, err, c.field)
		}
	}
	if err := Migrate(context.Background(), pool, Config{Table: "no good"}); err == nil {
		t.Errorf("Migrate with a bad table name succeeded")
	}
}

// Migrate runs the schema; running it again (or concurrently) is harmless,
// and a store made with SkipMigrate uses it.
func TestMigrate(t *testing.T) {
	pool := newPool(t, 8)
	ctx := context.Background()
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- Migrate(ctx, pool, Config{Table: "mine"}) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	s := newStore(t, pool, Config{Table: "mine", SkipMigrate: true, SweepInterval: -1})
	v, err := limiter.Consume(ctx, s, "k", limiter.Limit{Uses: 1, Window: time.Second})
	if err != nil || !v.Allowed {
		t.Fatalf("Consume on a migrated table: %+v, %v", v, err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM mine_log").Scan(&n); err != nil || n != 1 {
		t.Fatalf("mine_log holds %d rows (%v), want 1", n, err)
	}
	if _, err := New(ctx, Config{Pool: pool, Table: "missing", SkipMigrate: true, SweepInterval: -1}); err != nil {
		t.Fatalf("New with SkipMigrate: %v", err)
	}
}

// A key's expired uses go when it is next used; the background sweeper
// removes the rest.
func TestExpiredRowsGo(t *testing.T) {
	pool := newPool(t, 4)
	ctx := context.Background()
	s := newStore(t, pool, Config{SweepInterval: 20 * time.Millisecond})
	count := func(table string) int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	l := limiter.Limit{Uses: 5, Window: 50 * time.Millisecond}
	for range 3 {
		if _, err := limiter.Consume(ctx, s, "a", l); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for count(s.table+"_log") != 0 || count(s.table) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the window: %d log rows, %d counters; the sweeper should have removed them", count(s.table+"_log"), count(s.table))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Off: rows stay until the key is used again.
	off := newStore(t, pool, Config{SweepInterval: -1})
	for range 3 {
		if _, err := limiter.Consume(ctx, off, "a", l); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * l.Window)
	if n := count(off.table + "_log"); n != 3 {
		t.Fatalf("%d log rows with the sweeper off, want 3", n)
	}
	if _, err := limiter.Consume(ctx, off, "a", l); err != nil {
		t.Fatal(err)
	}
	if n := count(off.table + "_log"); n != 1 {
		t.Fatalf("%d log rows after the key was used again, want 1 (its expired uses deleted)", n)
	}
}

// A table migrated by the code before the moves record (its function
// returns no mi, mv) migrates again: the function without them is
// replaced, and a one-round-trip store stamps and releases on it.
func TestMigrateFromBeforeMoves(t *testing.T) {
	pool := newPool(t, 4)
	ctx := context.Background()
	const table = "before_moves"
	if err := Migrate(ctx, pool, Config{Table: table}); err != nil {
		t.Fatal(err)
	}
	// The old function's shape: the same arguments, six results.
	old := `DROP FUNCTION ` + table + `_decide(bytea[], smallint[], bigint[], bigint[], bigint[], bigint[], bigint[], boolean, bigint, bigint[], bigint[], boolean);
CREATE FUNCTION ` + table + `_decide(
	p_keys bytea[], p_algs smallint[], p_wins bigint[], p_uses bigint[], p_costs bigint[],
	p_ids bigint[], p_locks bigint[], p_record boolean, p_now bigint, p_ends bigint[],
	p_bursts bigint[], p_debit boolean,
	OUT now_us bigint, OUT ok boolean[], OUT rem bigint[], OUT wt bigint[], OUT rs bigint[], OUT rc bigint[])
LANGUAGE plpgsql AS $$ BEGIN now_us := 0; END $$`
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, old)
	conn.Release()
	if err != nil {
		t.Fatalf("installing the old function: %v", err)
	}
	s := newStore(t, pool, Config{Table: table, Mode: OneRoundTrip, SweepInterval: -1})
	sqltest.BucketMoves(t, s, s.engine.PinClock)
}

// OneRoundTrip really runs the function: without it, calls fail.
func TestOneRoundTripUsesFunction(t *testing.T) {
	pool := newPool(t, 2)
	s := newStore(t, pool, Config{Mode: OneRoundTrip, SweepInterval: -1})
	l := limiter.Limit{Uses: 1, Window: time.Second}
	if v, err := limiter.Consume(context.Background(), s, "k", l); err != nil || !v.Allowed {
		t.Fatalf("Consume: %+v, %v", v, err)
	}
	if _, err := pool.Exec(context.Background(), "DROP FUNCTION "+s.table+"_decide"); err != nil {
		t.Fatal(err)
	}
	if _, err := limiter.Consume(context.Background(), s, "k2", l); err == nil {
		t.Fatal("Consume succeeded with the function dropped")
	}
}

func TestClosed(t *testing.T) {
	s := newStore(t, newPool(t, 2), Config{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	_, err := limiter.Consume(context.Background(), s, "k", limiter.Limit{Uses: 1, Window: time.Second})
	if !errors.Is(err, limiter.ErrClosed) {
		t.Fatalf("Consume after Close: %v, want ErrClosed", err)
	}
}

// A database error comes back wrapped, not as a refusal.
func TestDatabaseError(t *testing.T) {
	pool := newPool(t, 2)
	s := newStore(t, pool, Config{SweepInterval: -1})
	if _, err := pool.Exec(context.Background(), "DROP TABLE "+s.table+"_log"); err != nil {
		t.Fatal(err)
	}
	_, err := limiter.Consume(context.Background(), s, "k", limiter.Limit{Uses: 1, Window: time.Second})
	if err == nil {
		t.Fatal("Consume with the log table dropped succeeded")
	}
	// The store works again once the table is back (the broken
	// transaction was ended, its connection not reused mid-transaction).
	if err := Migrate(context.Background(), pool, Config{Table: s.table}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		v, err := limiter.Consume(context.Background(), s, fmt.Sprint("k", i), limiter.Limit{Uses: 1, Window: time.Second})
		if err != nil || !v.Allowed {
			t.Fatalf("after the table came back: %+v, %v", v, err)
		}
	}
}

func BenchmarkConsume(b *testing.B) {
	pool := newPool(b, 32)
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			cfg := m.cfg
			cfg.SweepInterval = -1
			sqltest.Bench(b, newStore(b, pool, cfg))
		})
	}
}
