package sqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/ringlimit/ringlimit/limiter"
)

// Text writes the statements of the database/sql stores (MySQL, SQLite).
// Values are written into the SQL as literals: keys as X'hex' blobs,
// everything else as integers, so no input reaches the SQL unescaped, and
// a statement is one round trip on the text protocol (go-sql-driver/mysql
// otherwise prepares, executes and closes: three). The table name was
// checked by CheckTable.
type Text struct {
	// Table is the counters table; its log table is Table+"_log".
	Table string
	// Upsert follows "INSERT INTO Table (ckey, alg, win_us, a, b, c,
	// exp_us) VALUES ..." and makes it update a, b, c and exp_us of rows
	// that exist.
	Upsert string
	// Clock is an expression for the database's clock in Unix µs, or ""
	// when the caller supplies the time.
	Clock string
}

func blob(b *strings.Builder, key string) {
	b.WriteString("X'")
	b.WriteString(hex.EncodeToString([]byte(key)))
	b.WriteByte('\'')
}

func num(b *strings.Builder, x int64) { b.WriteString(strconv.FormatInt(x, 10)) }

func (t *Text) counterValues(b *strings.Builder, c *Counter, a, bb, cc, exp int64) {
	t.rowValues(b, c, int64(c.Alg), a, bb, cc, exp)
}

func (t *Text) rowValues(b *strings.Builder, c *Counter, alg, a, bb, cc, exp int64) {
	b.WriteByte('(')
	blob(b, c.Key)
	for _, x := range [...]int64{alg, c.Window, a, bb, cc, exp} {
		b.WriteByte(',')
		num(b, x)
	}
	b.WriteByte(')')
}

// Lock returns an INSERT that creates or locks (with an exclusive row
// lock, as MySQL's ON DUPLICATE KEY UPDATE takes one) each counter's row,
// in the order of cs. New rows hold an empty state.
func (t *Text) Lock(cs []*Counter) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + t.Table + " (ckey, alg, win_us, a, b, c, exp_us) VALUES ")
	for i, c := range cs {
		if i > 0 {
			b.WriteByte(',')
		}
		t.counterValues(&b, c, 0, 0, 0, 0)
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE exp_us = exp_us")
	return b.String()
}

// Load returns one SELECT that reads every counter's row (and a token
// bucket's moves record row), every log use of the sliding logs among
// them and, when Clock is set, the clock, as rows of (kind, ckey, alg,
// win_us, a, b, c); ScanLoad reads them.
func (t *Text) Load(cs []*Counter) string {
	var b strings.Builder
	b.WriteString("SELECT 0, ckey, alg, win_us, a, b, c FROM " + t.Table + " WHERE ")
	row := func(c *Counter, alg int64) {
		b.WriteString("(ckey = ")
		blob(&b, c.Key)
		b.WriteString(" AND alg = ")
		num(&b, alg)
		b.WriteString(" AND win_us = ")
		num(&b, c.Window)
		b.WriteByte(')')
	}
	for i, c := range cs {
		if i > 0 {
			b.WriteString(" OR ")
		}
		row(c, int64(c.Alg))
		if c.Alg == limiter.TokenBucket {
			b.WriteString(" OR ")
			row(c, MovesAlg)
		}
	}
	logs := 0
	for _, c := range cs {
		if !LogKept(c.Alg) {
			continue
		}
		if logs == 0 {
			b.WriteString(" UNION ALL SELECT 1, ckey, 0, win_us, id, at_us, cost FROM " + t.Table + "_log WHERE ")
		} else {
			b.WriteString(" OR ")
		}
		logs++
		b.WriteString("(ckey = ")
		blob(&b, c.Key)
		b.WriteString(" AND win_us = ")
		num(&b, c.LogWin())
		b.WriteByte(')')
	}
	if t.Clock != "" {
		b.WriteString(" UNION ALL SELECT 2, X'00', 0, 0, " + t.Clock + ", 0, 0")
	}
	return b.String()
}

type counterID struct {
	key string
	alg limiter.Algorithm
	win int64
}

// ScanLoad reads the rows of Load into cs and returns the clock reading
// (0 when Load read none).
func ScanLoad(rows *sql.Rows, cs []*Counter) (int64, error) {
	defer rows.Close()
	byID := make(map[counterID]*Counter, len(cs))
	for _, c := range cs {
		byID[counterID{c.Key, c.Alg, c.Window}] = c
	}
	var (
		now, kind, alg, win, a, b, c int64
		key                          []byte
	)
	for rows.Next() {
		if err := rows.Scan(&kind, &key, &alg, &win, &a, &b, &c); err != nil {
			return 0, err
		}
		switch kind {
		case 0:
			SetLoaded(func(g limiter.Algorithm) *Counter { return byID[counterID{string(key), g, win}] }, alg, a, b, c)
		case 1:
			alg, w := LogRowCounter(win)
			if ct := byID[counterID{string(key), alg, w}]; ct != nil {
				ct.AddUse(a, b, c)
			}
		default:
			now = a
		}
	}
	return now, rows.Err()
}

// Save returns the statements that write the counters' changes (none when
// nothing changed).
func (t *Text) Save(cs []*Counter) []string {
	var out []string
	var b strings.Builder
	n := 0
	// next opens the statement before its first row, a comma before the
	// others: counters and moves records go in one upsert.
	next := func() {
		if n == 0 {
			b.WriteString("INSERT INTO " + t.Table + " (ckey, alg, win_us, a, b, c, exp_us) VALUES ")
		} else {
			b.WriteByte(',')
		}
		n++
	}
	for _, c := range cs {
		if c.Dirty {
			next()
			a, bb, cc, exp := c.Row()
			t.counterValues(&b, c, a, bb, cc, exp)
		}
	}
	for _, c := range cs {
		if c.MovesDirty {
			next()
			a, bb, cc, exp := c.MovesRow()
			t.rowValues(&b, c, MovesAlg, a, bb, cc, exp)
		}
	}
	if n > 0 {
		b.WriteString(t.Upsert)
		out = append(out, b.String())
	}
	b.Reset()
	n = 0
	for _, c := range cs {
		if len(c.Delete) == 0 {
			continue
		}
		if n == 0 {
			b.WriteString("DELETE FROM " + t.Table + "_log WHERE ")
		} else {
			b.WriteString(" OR ")
		}
		n++
		b.WriteString("(ckey = ")
		blob(&b, c.Key)
		b.WriteString(" AND win_us = ")
		num(&b, c.LogWin())
		b.WriteString(" AND id IN (")
		for i, id := range c.Delete {
			if i > 0 {
				b.WriteByte(',')
			}
			num(&b, int64(id))
		}
		b.WriteString("))")
	}
	if n > 0 {
		out = append(out, b.String())
	}
	b.Reset()
	n = 0
	for _, c := range cs {
		for _, u := range c.Insert {
			if n == 0 {
				b.WriteString("INSERT INTO " + t.Table + "_log (ckey, win_us, id, at_us, cost, exp_us) VALUES ")
			} else {
				b.WriteByte(',')
			}
			n++
			b.WriteByte('(')
			blob(&b, c.Key)
			for _, x := range [...]int64{c.LogWin(), int64(u.ID), u.At, u.Cost, c.LogExp(u.At)} {
				b.WriteByte(',')
				num(&b, x)
			}
			b.WriteByte(')')
		}
	}
	if n > 0 {
		out = append(out, b.String())
	}
	return out
}

// Sweep returns the two DELETEs that drop what expired by now.
func (t *Text) Sweep(now int64) []string {
	n := strconv.FormatInt(now, 10)
	return []string{
		"DELETE FROM " + t.Table + "_log WHERE exp_us <= " + n,
		"DELETE FROM " + t.Table + " WHERE exp_us <= " + n,
	}
}

// Count returns the statement that counts the counters held.
func (t *Text) Count() string { return "SELECT count(*) FROM " + t.Table }

// Errorf wraps a database error with what the store was doing.
func Errorf(store, doing string, err error) error {
	return fmt.Errorf("ringlimit/%s: %s: %w", store, doing, err)
}

// NopTx is the Tx of a read that took no transaction (a peek).
type NopTx struct{}

// Save does nothing.
func (NopTx) Save(context.Context, []*Counter) error { return nil }

// Commit does nothing.
func (NopTx) Commit(context.Context) error { return nil }

// Rollback does nothing.
func (NopTx) Rollback() {}

// DBTx is the Tx of the database/sql stores: Save runs Text.Save's
// statements in the transaction.
type DBTx struct {
	Tx    *sql.Tx
	Text  *Text
	Store string // "mysql", "sqlite": for error messages
}

// Save runs the writes.
func (t *DBTx) Save(ctx context.Context, cs []*Counter) error {
	for _, stmt := range t.Text.Save(cs) {
		if _, err := t.Tx.ExecContext(ctx, stmt); err != nil {
			return Errorf(t.Store, "write", err)
		}
	}
	return nil
}

// Commit commits.
func (t *DBTx) Commit(context.Context) error {
	if err := t.Tx.Commit(); err != nil {
		return Errorf(t.Store, "commit", err)
	}
	return nil
}

// Rollback rolls back (a no-op after Commit).
func (t *DBTx) Rollback() { _ = t.Tx.Rollback() }
