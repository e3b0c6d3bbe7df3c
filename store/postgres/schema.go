package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ringlimit/ringlimit/limiter"

	"github.com/ringlimit/ringlimit/store/internal/sqlstore"
)

// Schema returns the SQL that creates the store's tables and indexes
// under table (CREATE ... IF NOT EXISTS, so running it again is harmless),
// for users who run migrations themselves. table must be an identifier
// (see Config.Table); Schema does not check it, Migrate does.
//
//	table      one row per counter: ckey, alg, win_us (primary key), the
//	           state a, b, c, and exp_us (when the state is empty again,
//	           Unix µs on the database's clock, indexed for Sweep); a
//	           token bucket a release lowered has a second row, its
//	           moves record, under alg 100 (see package sqlstore)
//	table_log  one row per sliding-log use: ckey, win_us, id (primary
//	           key), at_us, cost, exp_us (indexed); a concurrency
//	           limit's slots are rows too, under win_us = -TTL
//	table_decide(...)  the PL/pgSQL function of Mode OneRoundTrip
func Schema(table string) string {
	return strings.ReplaceAll(`CREATE TABLE IF NOT EXISTS {T} (
	ckey   bytea    NOT NULL,
	alg    smallint NOT NULL,
	win_us bigint   NOT NULL,
	a      bigint   NOT NULL,
	b      bigint   NOT NULL,
	c      bigint   NOT NULL,
	exp_us bigint   NOT NULL,
	PRIMARY KEY (ckey, alg, win_us)
);
CREATE INDEX IF NOT EXISTS {T}_exp ON {T} (exp_us);
CREATE TABLE IF NOT EXISTS {T}_log (
	ckey   bytea  NOT NULL,
	win_us bigint NOT NULL,
	id     bigint NOT NULL,
	at_us  bigint NOT NULL,
	cost   bigint NOT NULL,
	exp_us bigint NOT NULL,
	PRIMARY KEY (ckey, win_us, id)
);
CREATE INDEX IF NOT EXISTS {T}_log_exp ON {T}_log (exp_us);
`, "{T}", table) + functionFor(table) + ";\n"
}

// migrateLock is the advisory lock Migrate holds, so that several
// processes starting at once do not race on CREATE TABLE IF NOT EXISTS
// (which can fail with a unique violation in the catalogue).
const migrateLock = 0x72696e676c696d // "ringlim"

// Migrate creates the tables and indexes of cfg.Table (the default when
// empty) in one transaction. New calls it unless cfg.SkipMigrate is set.
// Only cfg.Table is read.
func Migrate(ctx context.Context, pool *pgxpool.Pool, cfg Config) error {
	if pool == nil {
		return &limiter.InputError{Field: "Pool", Reason: "must not be nil"}
	}
	table, err := sqlstore.Table("Table", cfg.Table)
	if err != nil {
		return err
	}
	sql := fmt.Sprintf("BEGIN; SELECT pg_advisory_xact_lock(%d); %s COMMIT;", migrateLock, Schema(table))
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return sqlstore.Errorf("postgres", "migrate", err)
	}
	defer conn.Release()
	// No arguments: pgx sends it with the simple protocol, which runs
	// several statements.
	if _, err := conn.Exec(ctx, sql); err != nil {
		return sqlstore.Errorf("postgres", "migrate", err)
	}
	return nil
}
