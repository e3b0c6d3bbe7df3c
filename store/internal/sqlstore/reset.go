package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/ringlimit/ringlimit/limiter"
)

// Lister is implemented by backends that can list a key's counters, so a
// reset without limits forgets every window of a key.
type Lister interface {
	// List returns the counters the tables hold for keys (rows of T and
	// of T_log, the latter as sliding logs), in any order, with Key, Alg
	// and Window set.
	List(ctx context.Context, keys []string) ([]*Counter, error)
}

// Reset forgets counters (limiter.Resetter): with limits, each key's
// counter of each; without, every counter the backend's Lister finds.
// It runs as a consume does: in one transaction that takes the counters'
// locks in order, so a consume under way is counted wholly before the
// reset or wholly after it, never half-erased. Each counter is written
// back empty (its log uses deleted) with an expiry of 0, which the next
// call reads as a new counter and the sweeper deletes.
func (e *Engine) Reset(ctx context.Context, store string, keys []string, limits []limiter.Limit) error {
	if e.closed.Load() {
		return limiter.ErrClosed
	}
	if err := e.bounds.CheckReset(keys, limits); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var err error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if err = e.reset(ctx, store, keys, limits); err == nil || !e.backend.Retryable(err) || ctx.Err() != nil {
			break
		}
	}
	return err
}

func (e *Engine) reset(ctx context.Context, store string, keys []string, limits []limiter.Limit) error {
	var cs []*Counter
	if len(limits) > 0 {
		entries := make([]limiter.Entry, 0, len(keys)*len(limits))
		for _, k := range keys {
			for _, l := range limits {
				entries = append(entries, limiter.Entry{Key: k, Limit: l})
			}
		}
		cs = Counters(entries)
	} else {
		l, ok := e.backend.(Lister)
		if !ok {
			return &limiter.UnsupportedError{Store: store, Op: "reset every window of a key", Reason: "name the limits"}
		}
		found, err := l.List(ctx, keys)
		if err != nil {
			return Errorf(store, "reset", err)
		}
		cs = distinct(found)
		if len(cs) == 0 {
			return nil
		}
	}
	tx, _, err := e.backend.Begin(ctx, cs, true)
	if err != nil {
		return err
	}
	for _, c := range cs {
		c.sortLog()
		for _, u := range c.Log.Uses {
			c.Delete = append(c.Delete, u.ID)
		}
		c.Log, c.Win, c.Bucket, c.Fixed = limiter.LogState{}, limiter.WindowState{}, limiter.BucketState{}, limiter.FixedState{}
		c.Dirty = true
	}
	if err := tx.Save(ctx, cs); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		tx.Rollback()
		return err
	}
	return nil
}

// distinct sorts counters into lock order without repeats.
func distinct(cs []*Counter) []*Counter {
	slices.SortFunc(cs, compare)
	return slices.CompactFunc(cs, func(a, b *Counter) bool { return compare(a, b) == 0 })
}

// List returns the SELECT of every counter of keys, as rows of (ckey,
// alg, win_us) (see Lister).
func (t *Text) List(keys []string) string {
	var b strings.Builder
	in := func() {
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			blob(&b, k)
		}
	}
	b.WriteString("SELECT ckey, alg, win_us FROM " + t.Table + " WHERE ckey IN (")
	in()
	b.WriteString(") UNION SELECT ckey, 0, win_us FROM " + t.Table + "_log WHERE ckey IN (")
	in()
	b.WriteString(")")
	return b.String()
}

// ScanList reads List's rows.
func ScanList(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
}) ([]*Counter, error) {
	var cs []*Counter
	for rows.Next() {
		var key []byte
		var alg, win int64
		if err := rows.Scan(&key, &alg, &win); err != nil {
			return nil, err
		}
		if alg == MovesAlg {
			// A token bucket's moves record: its bucket is the counter
			// (the record stays: see the package doc).
			alg = int64(limiter.TokenBucket)
		}
		if alg < 0 || !limiter.Algorithm(alg).Valid() {
			return nil, fmt.Errorf("a row names algorithm %d", alg)
		}
		cs = append(cs, &Counter{Key: string(key), Alg: limiter.Algorithm(alg), Window: win})
	}
	return cs, rows.Err()
}
