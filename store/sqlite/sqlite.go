package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver: pure Go, no cgo

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/store/internal/sqlstore"
)

// Config configures New. Only Path is required.
type Config struct {
	// Path is the database file, created when missing. Every process
	// that shares the limits opens the same file (on one host: SQLite
	// locks do not work across network file systems). It must not
	// contain '?'.
	Path string
	// Table names the counters table; the log table is Table+"_log".
	// An identifier (letter or _, then letters, digits, _), at most 48
	// bytes. Default "ringlimit_counters".
	Table string
	// SkipMigrate stops New from creating the schema. Default false.
	SkipMigrate bool
	// BusyTimeout is how long a call waits for another process's write
	// lock before it fails. Default 5 s.
	BusyTimeout time.Duration
	// Synchronous is SQLite's synchronous setting: "OFF", "NORMAL" or
	// "FULL". Default "NORMAL" (in WAL mode a power loss may lose the
	// last writes, never corrupt the file).
	Synchronous string
	// SweepInterval is how often the store deletes expired rows of keys
	// no longer used (a key's own expired rows go when it is next used).
	// Default 1 minute; negative turns the sweeper off.
	SweepInterval time.Duration
	// Bounds on input; zero fields mean limiter's defaults. MaxKeys is
	// not supported and must be 0.
	Bounds limiter.Bounds
	// Clock reads the time. Default: the process clock, read as the wall
	// time at New plus the monotonic time elapsed since, so a wall-clock
	// step inside the process never moves a window.
	Clock limiter.Clock
	// Logger receives sweeper failures. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) check() (string, error) {
	bad := func(field, reason string) error { return &limiter.InputError{Field: field, Reason: reason} }
	if c.Path == "" {
		return "", bad("Path", "must not be empty")
	}
	if strings.ContainsRune(c.Path, '?') {
		return "", bad("Path", "must not contain '?'")
	}
	if c.BusyTimeout < 0 {
		return "", bad("BusyTimeout", "must not be negative")
	}
	switch strings.ToUpper(c.Synchronous) {
	case "", "OFF", "NORMAL", "FULL":
	default:
		return "", bad("Synchronous", fmt.Sprintf("%q is not OFF, NORMAL or FULL", c.Synchronous))
	}
	if c.Bounds.MaxKeys != 0 {
		return "", bad("Bounds.MaxKeys", "not supported by the SQL stores; must be 0")
	}
	return sqlstore.Table("Table", c.Table)
}

func (c *Config) dsn() string {
	busy := c.BusyTimeout
	if busy == 0 {
		busy = 5 * time.Second
	}
	sync := strings.ToUpper(c.Synchronous)
	if sync == "" {
		sync = "NORMAL"
	}
	// _txlock=immediate makes every BeginTx a BEGIN IMMEDIATE: the write
	// lock is taken before the transaction reads, so two processes cannot
	// both read the same state and both take the last use.
	return fmt.Sprintf("%s?_txlock=immediate&_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(%s)",
		c.Path, busy.Milliseconds(), sync)
}

// Store is a limiter.Store on an SQLite file. Safe for concurrent use,
// and by several processes on one host.
type Store struct {
	db     *sql.DB
	text   sqlstore.Text
	clock  clock
	engine *sqlstore.Engine
}

var _ limiter.Store = (*Store)(nil)

// New opens (creating when missing) the database at cfg.Path, creates the
// schema unless cfg.SkipMigrate, and starts the sweeper. Close closes the
// database.
func New(ctx context.Context, cfg Config) (*Store, error) {
	table, err := cfg.check()
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", cfg.dsn())
	if err != nil {
		return nil, sqlstore.Errorf("sqlite", "open", err)
	}
	// One connection: calls of this process queue in database/sql rather
	// than in SQLite's busy handler, which sleeps. Other processes are
	// waited for by busy_timeout.
	db.SetMaxOpenConns(1)
	if !cfg.SkipMigrate {
		if err := Migrate(ctx, db, cfg); err != nil {
			db.Close()
			return nil, err
		}
	} else if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, sqlstore.Errorf("sqlite", "open", err)
	}
	s := &Store{
		db:    db,
		clock: newClock(cfg.Clock),
		text: sqlstore.Text{
			Table:  table,
			Upsert: " ON CONFLICT (ckey, alg, win_us) DO UPDATE SET a = excluded.a, b = excluded.b, c = excluded.c, exp_us = excluded.exp_us",
		},
	}
	s.engine = sqlstore.NewEngine(&backend{s}, cfg.Bounds)
	s.engine.StartSweeper(sqlstore.SweepInterval(cfg.SweepInterval), s.Sweep, cfg.Logger)
	return s, nil
}

// Schema returns the SQL that creates the store's tables and indexes under
// table (IF NOT EXISTS: running it again is harmless). The shape is that
// of the other SQL stores (see package store/postgres).
func Schema(table string) string {
	return strings.ReplaceAll(`CREATE TABLE IF NOT EXISTS {T} (
	ckey   BLOB    NOT NULL,
	alg    INTEGER NOT NULL,
	win_us INTEGER NOT NULL,
	a      INTEGER NOT NULL,
	b      INTEGER NOT NULL,
	c      INTEGER NOT NULL,
	exp_us INTEGER NOT NULL,
	PRIMARY KEY (ckey, alg, win_us)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {T}_exp ON {T} (exp_us);
CREATE TABLE IF NOT EXISTS {T}_log (
	ckey   BLOB    NOT NULL,
	win_us INTEGER NOT NULL,
	id     INTEGER NOT NULL,
	at_us  INTEGER NOT NULL,
	cost   INTEGER NOT NULL,
	exp_us INTEGER NOT NULL,
	PRIMARY KEY (ckey, win_us, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {T}_log_exp ON {T}_log (exp_us);
`, "{T}", table)
}

// Migrate creates the tables of cfg.Table (default when empty) in db, in
// one transaction. Only cfg.Table is read.
func Migrate(ctx context.Context, db *sql.DB, cfg Config) error {
	if db == nil {
		return &limiter.InputError{Field: "db", Reason: "must not be nil"}
	}
	table, err := sqlstore.Table("Table", cfg.Table)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return sqlstore.Errorf("sqlite", "migrate", err)
	}
	defer tx.Rollback()
	for _, stmt := range strings.Split(Schema(table), ";\n") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return sqlstore.Errorf("sqlite", "migrate", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return sqlstore.Errorf("sqlite", "migrate", err)
	}
	return nil
}

// ConsumeMany checks and records a batch in one BEGIN IMMEDIATE
// transaction.
func (s *Store) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return s.engine.Consume(ctx, entries)
}

// PeekMany answers what ConsumeMany would, recording nothing (one SELECT,
// one snapshot).
func (s *Store) PeekMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return s.engine.Peek(ctx, entries)
}

// Close stops the sweeper and closes the database; later calls get
// limiter.ErrClosed. Idempotent.
func (s *Store) Close() error {
	s.engine.Close()
	return s.db.Close() // a second Close of a *sql.DB returns nil
}

// Sweep deletes every row whose uses have all left their window and
// returns how many counters went.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, sqlstore.Errorf("sqlite", "sweep", err)
	}
	defer tx.Rollback()
	var n int64
	for _, stmt := range s.text.Sweep(s.clock.now()) {
		r, err := tx.ExecContext(ctx, stmt)
		if err != nil {
			return 0, sqlstore.Errorf("sqlite", "sweep", err)
		}
		n, _ = r.RowsAffected()
	}
	if err := tx.Commit(); err != nil {
		return 0, sqlstore.Errorf("sqlite", "sweep", err)
	}
	return n, nil
}

// Len returns the number of counters held, expired ones not yet swept
// included.
func (s *Store) Len(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, s.text.Count()).Scan(&n); err != nil {
		return 0, sqlstore.Errorf("sqlite", "len", err)
	}
	return n, nil
}

// clock is the store's time in Unix µs: the wall time at New plus the
// monotonic time elapsed since. SQLite runs on one host, so the processes
// sharing a file share its clock; a wall-clock step shows only in
// processes started after it, by as much as the step.
type clock struct {
	c      limiter.Clock
	origin time.Time
	base   int64
}

func newClock(c limiter.Clock) clock {
	if c == nil {
		c = limiter.RealClock
	}
	o := c.Now()
	return clock{c: c, origin: o, base: o.UnixMicro()}
}

func (c *clock) now() int64 { return c.base + int64(c.c.Now().Sub(c.origin)/time.Microsecond) }

type backend struct{ s *Store }

func (backend) Retryable(error) bool { return false }

func (b backend) Begin(ctx context.Context, cs []*sqlstore.Counter, lock bool) (sqlstore.Tx, int64, error) {
	load := b.s.text.Load(cs)
	if !lock {
		now := b.s.clock.now()
		rows, err := b.s.db.QueryContext(ctx, load)
		if err != nil {
			return nil, 0, sqlstore.Errorf("sqlite", "read", err)
		}
		if _, err := sqlstore.ScanLoad(rows, cs); err != nil {
			return nil, 0, sqlstore.Errorf("sqlite", "read", err)
		}
		return sqlstore.NopTx{}, now, nil
	}
	tx, err := b.s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: waits for the write lock
	if err != nil {
		return nil, 0, sqlstore.Errorf("sqlite", "begin", err)
	}
	now := b.s.clock.now() // after the lock
	rows, err := tx.QueryContext(ctx, load)
	if err == nil {
		_, err = sqlstore.ScanLoad(rows, cs)
	}
	if err != nil {
		_ = tx.Rollback()
		return nil, 0, sqlstore.Errorf("sqlite", "read", err)
	}
	return &sqlstore.DBTx{Tx: tx, Text: &b.s.text, Store: "sqlite"}, now, nil
}
