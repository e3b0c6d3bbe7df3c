package postgres

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/store/internal/sqlstore"
)

// MaxKeyBytes is the largest Bounds.MaxKeyBytes the store accepts: a
// PostgreSQL b-tree entry holds at most about 2,700 bytes.
const MaxKeyBytes = 2048

// Config configures New. Only Pool is required.
type Config struct {
	// Pool is the connection pool the store uses; required. The store
	// never closes it.
	Pool *pgxpool.Pool
	// Table names the counters table; the log table is Table+"_log".
	// An identifier (letter or _, then letters, digits, _), at most 48
	// bytes. Default "ringlimit_counters".
	Table string
	// SkipMigrate stops New from creating the schema (run Migrate or
	// Schema yourself). Default false: New runs Migrate.
	SkipMigrate bool
	// SweepInterval is how often the store deletes expired rows of keys
	// no longer used (a key's own expired rows go when it is next used).
	// Default 1 minute; negative turns the sweeper off (call Sweep
	// yourself).
	SweepInterval time.Duration
	// Bounds on input; zero fields mean limiter's defaults. MaxKeyBytes
	// may be at most 2048 (MaxKeyBytes). MaxKeys is not supported here
	// (counting rows per call would cost a scan) and must be 0.
	Bounds limiter.Bounds
	// Mode chooses how a call runs: OneRoundTrip (the default, measured
	// faster) or TwoRoundTrips.
	Mode Mode
	// AsyncCommit sets synchronous_commit = off in the store's
	// transactions: a call no longer waits for its commit to reach the
	// disk (often most of its time), and a crash of the server may forget
	// the uses recorded in its last moments (at most about three
	// wal_writer_delay, 0.6 s by default); it never corrupts anything.
	// Default false: the server's setting.
	AsyncCommit bool
	// Logger receives sweeper failures. Default slog.Default().
	Logger *slog.Logger
}

// Mode chooses how the store runs a call.
type Mode uint8

const (
	// OneRoundTrip runs each call as one statement calling a PL/pgSQL
	// function (installed by Migrate; see Schema) that locks, reads the
	// clock, decides with limiter's arithmetic written in SQL (tested on
	// limiter's vectors and against limiter.Memory), and records.
	// Releases run as in TwoRoundTrips. The default.
	OneRoundTrip Mode = iota
	// TwoRoundTrips runs each call as a transaction in two pipelined
	// round trips (lock, clock and read; then write and commit) and
	// decides in Go with package limiter's own functions.
	TwoRoundTrips
)

func (c *Config) check() (string, error) {
	if c.Pool == nil {
		return "", &limiter.InputError{Field: "Pool", Reason: "must not be nil"}
	}
	table, err := sqlstore.Table("Table", c.Table)
	if err != nil {
		return "", err
	}
	if c.Bounds.MaxKeyBytes > MaxKeyBytes {
		return "", &limiter.InputError{Field: "Bounds.MaxKeyBytes", Reason: "at most 2048 in PostgreSQL (b-tree entries are limited)", Bound: true}
	}
	if c.Mode > TwoRoundTrips {
		return "", &limiter.InputError{Field: "Mode", Reason: "unknown mode"}
	}
	if c.Bounds.MaxKeys != 0 {
		return "", &limiter.InputError{Field: "Bounds.MaxKeys", Reason: "not supported by the SQL stores; must be 0"}
	}
	return table, nil
}

// Store is a limiter.Store on PostgreSQL. Safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	table  string
	q      queries
	engine *sqlstore.Engine
}

var _ limiter.Store = (*Store)(nil)

// New returns a store on cfg.Pool, creating the schema unless
// cfg.SkipMigrate, and starts its sweeper. Call Close to stop it.
func New(ctx context.Context, cfg Config) (*Store, error) {
	table, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if !cfg.SkipMigrate {
		if err := Migrate(ctx, cfg.Pool, cfg); err != nil {
			return nil, err
		}
	}
	s := &Store{pool: cfg.Pool, table: table, q: newQueries(table)}
	b := &backend{pool: cfg.Pool, q: &s.q, async: cfg.AsyncCommit}
	s.engine = sqlstore.NewEngine(b, cfg.Bounds)
	if cfg.Mode == OneRoundTrip {
		s.engine.UseOneShot(b)
	}
	s.engine.StartSweeper(sqlstore.SweepInterval(cfg.SweepInterval), s.Sweep, cfg.Logger)
	return s, nil
}

// ConsumeMany checks and records a batch in one transaction: one round
// trip (OneRoundTrip) or two (TwoRoundTrips).
func (s *Store) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return s.engine.Consume(ctx, entries)
}

// PeekMany answers what ConsumeMany would, recording nothing: one
// statement (so one snapshot), no locks, one round trip.
func (s *Store) PeekMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return s.engine.Peek(ctx, entries)
}

// Close stops the sweeper; later calls get limiter.ErrClosed. The pool
// stays open. Idempotent.
func (s *Store) Close() error {
	s.engine.Close()
	return nil
}

// Sweep deletes every row whose uses have all left their window, by the
// database's clock, and returns how many counters went.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	if _, err := s.pool.Exec(ctx, s.q.sweepLog); err != nil {
		return 0, sqlstore.Errorf("postgres", "sweep", err)
	}
	tag, err := s.pool.Exec(ctx, s.q.sweep)
	if err != nil {
		return 0, sqlstore.Errorf("postgres", "sweep", err)
	}
	return tag.RowsAffected(), nil
}

// Len returns the number of counters held (rows of Table), expired ones
// not yet swept included.
func (s *Store) Len(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+s.table).Scan(&n); err != nil {
		return 0, sqlstore.Errorf("postgres", "len", err)
	}
	return n, nil
}

// queries are the store's statements. Their text does not depend on the
// batch (values travel as arrays), so pgx prepares each once per
// connection.
type queries struct {
	lock, load, upsert, deleteUses, insertUses, sweepLog, sweep, decide, list string
}

const clockMicros = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"

func newQueries(table string) queries {
	r := strings.NewReplacer("{T}", table, "{NOW}", clockMicros)
	return queries{
		lock: "SELECT pg_advisory_xact_lock(l) FROM unnest($1::bigint[]) AS l",
		load: r.Replace(`SELECT 0, t.ckey, t.alg, t.win_us, t.a, t.b, t.c
FROM unnest($1::bytea[], $2::smallint[], $3::bigint[]) AS u(k, g, w)
JOIN {T} t ON t.ckey = u.k AND t.alg = u.g AND t.win_us = u.w
UNION ALL
SELECT 1, l.ckey, 0::smallint, l.win_us, l.id, l.at_us, l.cost
FROM unnest($4::bytea[], $5::bigint[]) AS v(k, w)
JOIN {T}_log l ON l.ckey = v.k AND l.win_us = v.w
UNION ALL
SELECT 2, '\x'::bytea, 0::smallint, 0, {NOW}, 0, 0`),
		upsert: r.Replace(`INSERT INTO {T} (ckey, alg, win_us, a, b, c, exp_us)
SELECT * FROM unnest($1::bytea[], $2::smallint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[])
ON CONFLICT (ckey, alg, win_us) DO UPDATE SET a = EXCLUDED.a, b = EXCLUDED.b, c = EXCLUDED.c, exp_us = EXCLUDED.exp_us`),
		deleteUses: r.Replace(`DELETE FROM {T}_log l USING unnest($1::bytea[], $2::bigint[], $3::bigint[]) AS u(k, w, id)
WHERE l.ckey = u.k AND l.win_us = u.w AND l.id = u.id`),
		insertUses: r.Replace(`INSERT INTO {T}_log (ckey, win_us, id, at_us, cost, exp_us)
SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[])`),
		sweepLog: r.Replace("DELETE FROM {T}_log WHERE exp_us <= {NOW}"),
		sweep:    r.Replace("DELETE FROM {T} WHERE exp_us <= {NOW}"),
		list: r.Replace(`SELECT ckey, alg, win_us FROM {T} WHERE ckey = ANY($1::bytea[])
UNION SELECT ckey, 0, win_us FROM {T}_log WHERE ckey = ANY($1::bytea[])`),
		decide: r.Replace(`SELECT now_us, ok, rem, wt, rs, rc, mi, mv FROM {T}_decide($1::bytea[], $2::smallint[], $3::bigint[],
$4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::boolean, $9::bigint, $10::bigint[], $11::bigint[], $12::boolean)`),
	}
}

// backend runs the engine's transactions.
type backend struct {
	pool  *pgxpool.Pool
	q     *queries
	async bool
}

// Retryable reports a deadlock or serialisation failure, after which the
// whole transaction can run again. With locks taken in sorted order a
// deadlock needs a lock taken elsewhere (a user's own statement).
func (*backend) Retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// Begin implements sqlstore.Backend: one pipelined round trip sends
// BEGIN, the advisory locks in sorted order, and the read with the clock
// taken after the locks.
func (s *backend) Begin(ctx context.Context, cs []*sqlstore.Counter, lock bool) (sqlstore.Tx, int64, error) {
	keys := make([][]byte, len(cs))
	algs := make([]int16, len(cs))
	wins := make([]int64, len(cs))
	var logKeys [][]byte
	var logWins []int64
	for i, c := range cs {
		keys[i], algs[i], wins[i] = []byte(c.Key), int16(c.Alg), c.Window
		if sqlstore.LogKept(c.Alg) {
			logKeys, logWins = append(logKeys, keys[i]), append(logWins, c.LogWin())
		}
	}
	for _, c := range cs {
		if c.Alg == limiter.TokenBucket { // and its moves record's row
			keys, algs, wins = append(keys, []byte(c.Key)), append(algs, sqlstore.MovesAlg), append(wins, c.Window)
		}
	}
	if logKeys == nil {
		logKeys, logWins = [][]byte{}, []int64{}
	}
	loadArgs := []any{keys, algs, wins, logKeys, logWins}
	if !lock {
		rows, err := s.pool.Query(ctx, s.q.load, loadArgs...)
		if err != nil {
			return nil, 0, sqlstore.Errorf("postgres", "read", err)
		}
		now, err := scan(rows, cs)
		if err != nil {
			return nil, 0, sqlstore.Errorf("postgres", "read", err)
		}
		return noTx{}, now, nil
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, 0, sqlstore.Errorf("postgres", "acquire", err)
	}
	tx := &tx{conn: conn, q: s.q}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if s.async {
		b.Queue("SET LOCAL synchronous_commit = off")
	}
	b.Queue(s.q.lock, sqlstore.LockIDs(cs))
	b.Queue(s.q.load, loadArgs...)
	br := conn.SendBatch(ctx, b)
	now, err := func() (int64, error) {
		for range b.Len() - 1 { // BEGIN, SET, the locks
			if _, err := br.Exec(); err != nil {
				return 0, err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return 0, err
		}
		return scan(rows, cs)
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		tx.Rollback()
		return nil, 0, sqlstore.Errorf("postgres", "lock and read", err)
	}
	return tx, now, nil
}

func scan(rows pgx.Rows, cs []*sqlstore.Counter) (int64, error) {
	defer rows.Close()
	type id struct {
		key string
		alg limiter.Algorithm
		win int64
	}
	byID := make(map[id]*sqlstore.Counter, len(cs))
	for _, c := range cs {
		byID[id{c.Key, c.Alg, c.Window}] = c
	}
	var (
		kind       int32
		alg        int16
		key        []byte
		win, a, b  int64
		c, now     int64
		scanTarget = []any{&kind, &key, &alg, &win, &a, &b, &c}
	)
	for rows.Next() {
		if err := rows.Scan(scanTarget...); err != nil {
			return 0, err
		}
		switch kind {
		case 0:
			sqlstore.SetLoaded(func(g limiter.Algorithm) *sqlstore.Counter { return byID[id{string(key), g, win}] }, int64(alg), a, b, c)
		case 1:
			alg, w := sqlstore.LogRowCounter(win)
			if ct := byID[id{string(key), alg, w}]; ct != nil {
				ct.AddUse(a, b, c)
			}
		default:
			now = a
		}
	}
	return now, rows.Err()
}

type noTx struct{}

func (noTx) Save(context.Context, []*sqlstore.Counter) error { return nil }
func (noTx) Commit(context.Context) error                    { return nil }
func (noTx) Rollback()                                       {}

// tx holds the call's connection; Save queues the writes and Commit sends
// them with COMMIT in one round trip.
type tx struct {
	conn  *pgxpool.Conn
	q     *queries
	batch pgx.Batch
}

func (t *tx) Save(_ context.Context, cs []*sqlstore.Counter) error {
	var (
		keys                    [][]byte
		algs                    []int16
		wins, as, bs, ccs, exps []int64
		dKeys                   [][]byte
		dWins, dIDs             []int64
		iKeys                   [][]byte
		iWins, iIDs, iAt, iCost []int64
		iExp                    []int64
	)
	for _, c := range cs {
		key := []byte(c.Key)
		if c.Dirty {
			a, b, cc, exp := c.Row()
			keys, algs, wins = append(keys, key), append(algs, int16(c.Alg)), append(wins, c.Window)
			as, bs, ccs, exps = append(as, a), append(bs, b), append(ccs, cc), append(exps, exp)
		}
		if c.MovesDirty {
			a, b, cc, exp := c.MovesRow()
			keys, algs, wins = append(keys, key), append(algs, sqlstore.MovesAlg), append(wins, c.Window)
			as, bs, ccs, exps = append(as, a), append(bs, b), append(ccs, cc), append(exps, exp)
		}
		for _, id := range c.Delete {
			dKeys, dWins, dIDs = append(dKeys, key), append(dWins, c.LogWin()), append(dIDs, int64(id))
		}
		for _, u := range c.Insert {
			iKeys, iWins, iIDs = append(iKeys, key), append(iWins, c.LogWin()), append(iIDs, int64(u.ID))
			iAt, iCost, iExp = append(iAt, u.At), append(iCost, u.Cost), append(iExp, c.LogExp(u.At))
		}
	}
	if len(keys) > 0 {
		t.batch.Queue(t.q.upsert, keys, algs, wins, as, bs, ccs, exps)
	}
	if len(dKeys) > 0 {
		t.batch.Queue(t.q.deleteUses, dKeys, dWins, dIDs)
	}
	if len(iKeys) > 0 {
		t.batch.Queue(t.q.insertUses, iKeys, iWins, iIDs, iAt, iCost, iExp)
	}
	return nil
}

func (t *tx) Commit(ctx context.Context) error {
	t.batch.Queue("COMMIT")
	err := t.conn.SendBatch(ctx, &t.batch).Close()
	if err != nil {
		return sqlstore.Errorf("postgres", "write and commit", err)
	}
	t.conn.Release()
	t.conn = nil
	return nil
}

// Rollback gives the connection back; pgxpool destroys a connection left
// inside a transaction, and the server rolls the transaction back.
func (t *tx) Rollback() {
	if t.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, _ = t.conn.Exec(ctx, "ROLLBACK")
	cancel()
	t.conn.Release()
	t.conn = nil
}

// DecideOnce implements sqlstore.OneShot: one statement, one round trip.
func (s *backend) DecideOnce(ctx context.Context, cs []*sqlstore.Counter, record bool, pinned *int64) (int64, error) {
	n := len(cs)
	keys, algs := make([][]byte, n), make([]int16, n)
	wins, uses, costs, ids, bursts := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	ends := make([]int64, 3*n)
	for i, c := range cs {
		keys[i], algs[i], wins[i], uses[i], costs[i], bursts[i] = []byte(c.Key), int16(c.Alg), c.Window, c.Limit.Uses, c.Cost, c.Limit.Capacity()
		if len(c.Insert) > 0 {
			ids[i] = int64(c.Insert[0].ID)
		}
		if c.Alg == limiter.FixedWindow && c.Limit.Calendar != limiter.NoCalendar {
			// The zone rules are Go's: the function picks its window among
			// the boundaries around the caller's clock.
			ref := time.Now().UnixMicro()
			if pinned != nil {
				ref = *pinned
			}
			ends[3*i], ends[3*i+1], ends[3*i+2] = limiter.CalendarEnds(ref, c.Limit)
		}
	}
	locks := []int64{}
	if record {
		locks = sqlstore.LockIDs(cs)
	}
	var (
		now                 int64
		ok                  []bool
		rem, wait, rs, mark []int64
		moveInc, moved      []int64
	)
	var err error
	if s.async && record {
		// Still one round trip: the batch is pipelined.
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue("SET LOCAL synchronous_commit = off")
		b.Queue(s.q.decide, keys, algs, wins, uses, costs, ids, locks, record, pinned, ends, bursts, cs[0].Debit).QueryRow(func(row pgx.Row) error {
			return row.Scan(&now, &ok, &rem, &wait, &rs, &mark, &moveInc, &moved)
		})
		b.Queue("COMMIT")
		err = s.pool.SendBatch(ctx, b).Close()
	} else {
		err = s.pool.QueryRow(ctx, s.q.decide, keys, algs, wins, uses, costs, ids, locks, record, pinned, ends, bursts, cs[0].Debit).Scan(&now, &ok, &rem, &wait, &rs, &mark, &moveInc, &moved)
	}
	if err != nil {
		return 0, sqlstore.Errorf("postgres", "decide", err)
	}
	return now, fill(cs, ok, rem, wait, rs, mark, moveInc, moved)
}

func fill(cs []*sqlstore.Counter, ok []bool, rem, wait, rs, mark, moveInc, moved []int64) error {
	if len(ok) != len(cs) || len(rem) != len(cs) || len(wait) != len(cs) || len(rs) != len(cs) || len(mark) != len(cs) || len(moveInc) != len(cs) || len(moved) != len(cs) {
		return sqlstore.Errorf("postgres", "decide", errors.New("the function returned arrays of the wrong length"))
	}
	for i, c := range cs {
		c.Out = limiter.Outcome{Allowed: ok[i], Remaining: rem[i], Wait: wait[i], Reset: rs[i]}
		c.Mark = mark[i]
		// The stamp of the bucket's live moves record (zeros: none).
		c.Moves = limiter.BucketMoves{Inc: uint64(moveInc[i]), Moved: moved[i]}
	}
	return nil
}
