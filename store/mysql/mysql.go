package mysql

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/store/internal/sqlstore"
)

// MaxKeyBytes is the largest key the schema holds (VARBINARY(2048) in a
// primary key; InnoDB keys hold at most 3072 bytes).
const MaxKeyBytes = 2048

// Config configures New. Only DB is required.
type Config struct {
	// DB is the database handle (driver github.com/go-sql-driver/mysql),
	// on MySQL 8 or MariaDB 10.6 and later; required. The store never
	// closes it. Any DSN works: the store sends its statements without
	// arguments (values are escaped literals), so each is one round trip
	// whether or not interpolateParams is set.
	DB *sql.DB
	// Table names the counters table; the log table is Table+"_log".
	// An identifier (letter or _, then letters, digits, _), at most 48
	// bytes. Default "ringlimit_counters".
	Table string
	// SkipMigrate stops New from creating the schema (run Migrate or
	// Schema yourself). Default false: New runs Migrate.
	SkipMigrate bool
	// SweepInterval is how often the store deletes expired rows of keys
	// no longer used (a key's own expired rows go when it is next used).
	// Default 1 minute; negative turns the sweeper off.
	SweepInterval time.Duration
	// Bounds on input; zero fields mean limiter's defaults. MaxKeyBytes
	// may be at most 2048. MaxKeys is not supported and must be 0.
	Bounds limiter.Bounds
	// Logger receives sweeper failures. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) check() (string, error) {
	if c.DB == nil {
		return "", &limiter.InputError{Field: "DB", Reason: "must not be nil"}
	}
	table, err := sqlstore.Table("Table", c.Table)
	if err != nil {
		return "", err
	}
	if c.Bounds.MaxKeyBytes > MaxKeyBytes {
		return "", &limiter.InputError{Field: "Bounds.MaxKeyBytes", Reason: "at most 2048 (the schema's VARBINARY(2048) key)", Bound: true}
	}
	if c.Bounds.MaxKeys != 0 {
		return "", &limiter.InputError{Field: "Bounds.MaxKeys", Reason: "not supported by the SQL stores; must be 0"}
	}
	return table, nil
}

// clock is the server's clock in Unix µs, independent of the session's
// time zone. UTC_TIMESTAMP(6) is the time the statement started, and the
// statement that reads it runs after the one that took the locks.
const clock = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"

// Store is a limiter.Store on MySQL or MariaDB. Safe for concurrent use.
type Store struct {
	db     *sql.DB
	text   sqlstore.Text
	engine *sqlstore.Engine
}

var _ limiter.Store = (*Store)(nil)

// New returns a store on cfg.DB, creating the schema unless
// cfg.SkipMigrate, and starts its sweeper. Call Close to stop it.
func New(ctx context.Context, cfg Config) (*Store, error) {
	table, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if !cfg.SkipMigrate {
		if err := Migrate(ctx, cfg.DB, cfg); err != nil {
			return nil, err
		}
	}
	s := &Store{
		db: cfg.DB,
		text: sqlstore.Text{
			Table: table,
			// VALUES() is deprecated in MySQL 8.0.20 but works there and
			// is the only spelling MariaDB knows.
			Upsert: " ON DUPLICATE KEY UPDATE a = VALUES(a), b = VALUES(b), c = VALUES(c), exp_us = VALUES(exp_us)",
			Clock:  clock,
		},
	}
	s.engine = sqlstore.NewEngine(backend{s}, cfg.Bounds)
	s.engine.StartSweeper(sqlstore.SweepInterval(cfg.SweepInterval), s.Sweep, cfg.Logger)
	return s, nil
}

// Schema returns the statements that create the store's tables and
// indexes under table (IF NOT EXISTS: running them again is harmless), in
// order, for users who run migrations themselves. The shape is that of
// the other SQL stores (see package store/postgres).
func Schema(table string) []string {
	r := strings.NewReplacer("{T}", table)
	return []string{
		r.Replace(`CREATE TABLE IF NOT EXISTS {T} (
	ckey   VARBINARY(2048) NOT NULL,
	alg    SMALLINT        NOT NULL,
	win_us BIGINT          NOT NULL,
	a      BIGINT          NOT NULL,
	b      BIGINT          NOT NULL,
	c      BIGINT          NOT NULL,
	exp_us BIGINT          NOT NULL,
	PRIMARY KEY (ckey, alg, win_us),
	KEY {T}_exp (exp_us)
) ENGINE=InnoDB`),
		r.Replace(`CREATE TABLE IF NOT EXISTS {T}_log (
	ckey   VARBINARY(2048) NOT NULL,
	win_us BIGINT          NOT NULL,
	id     BIGINT          NOT NULL,
	at_us  BIGINT          NOT NULL,
	cost   BIGINT          NOT NULL,
	exp_us BIGINT          NOT NULL,
	PRIMARY KEY (ckey, win_us, id),
	KEY {T}_log_exp (exp_us)
) ENGINE=InnoDB`),
	}
}

// Migrate creates the tables of cfg.Table (the default when empty). Only
// cfg.Table is read.
func Migrate(ctx context.Context, db *sql.DB, cfg Config) error {
	if db == nil {
		return &limiter.InputError{Field: "DB", Reason: "must not be nil"}
	}
	table, err := sqlstore.Table("Table", cfg.Table)
	if err != nil {
		return err
	}
	for _, stmt := range Schema(table) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return sqlstore.Errorf("mysql", "migrate", err)
		}
	}
	return nil
}

// ConsumeMany checks and records a batch in one transaction.
func (s *Store) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return s.engine.Consume(ctx, entries)
}

// PeekMany answers what ConsumeMany would, recording nothing: one SELECT
// (one snapshot, with the clock), no locks, one round trip.
func (s *Store) PeekMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return s.engine.Peek(ctx, entries)
}

// Close stops the sweeper; later calls get limiter.ErrClosed. The DB
// stays open. Idempotent.
func (s *Store) Close() error {
	s.engine.Close()
	return nil
}

// Sweep deletes every row whose uses have all left their window, by the
// server's clock, and returns how many counters went. Each DELETE runs on
// its own (autocommit), so it holds its locks briefly.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	var now int64
	if err := s.db.QueryRowContext(ctx, "SELECT "+clock).Scan(&now); err != nil {
		return 0, sqlstore.Errorf("mysql", "sweep", err)
	}
	var n int64
	for _, stmt := range s.text.Sweep(now) {
		r, err := s.db.ExecContext(ctx, stmt)
		if err != nil {
			return 0, sqlstore.Errorf("mysql", "sweep", err)
		}
		n, _ = r.RowsAffected()
	}
	return n, nil
}

// Len returns the number of counters held, expired ones not yet swept
// included.
func (s *Store) Len(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, s.text.Count()).Scan(&n); err != nil {
		return 0, sqlstore.Errorf("mysql", "len", err)
	}
	return n, nil
}

type backend struct{ s *Store }

// Retryable reports a deadlock InnoDB broke by rolling back this
// transaction.
func (backend) Retryable(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}

// Begin starts the transaction, takes an exclusive lock on each counter's
// row (inserting it when missing) in primary-key order, then reads the
// rows, the log uses and the server's clock in one SELECT.
func (b backend) Begin(ctx context.Context, cs []*sqlstore.Counter, lock bool) (sqlstore.Tx, int64, error) {
	load := b.s.text.Load(cs)
	if !lock {
		rows, err := b.s.db.QueryContext(ctx, load)
		if err != nil {
			return nil, 0, sqlstore.Errorf("mysql", "read", err)
		}
		now, err := sqlstore.ScanLoad(rows, cs)
		if err != nil {
			return nil, 0, sqlstore.Errorf("mysql", "read", err)
		}
		return sqlstore.NopTx{}, now, nil
	}
	tx, err := b.s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, 0, sqlstore.Errorf("mysql", "begin", err)
	}
	if _, err := tx.ExecContext(ctx, b.s.text.Lock(cs)); err != nil {
		_ = tx.Rollback()
		return nil, 0, sqlstore.Errorf("mysql", "lock", err)
	}
	rows, err := tx.QueryContext(ctx, load)
	var now int64
	if err == nil {
		now, err = sqlstore.ScanLoad(rows, cs)
	}
	if err != nil {
		_ = tx.Rollback()
		return nil, 0, sqlstore.Errorf("mysql", "read", err)
	}
	return &sqlstore.DBTx{Tx: tx, Text: &b.s.text, Store: "mysql"}, now, nil
}
