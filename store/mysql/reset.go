package mysql

import (
	"context"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/store/internal/sqlstore"
)

var _ limiter.Resetter = (*Store)(nil)

// Reset forgets counters (see limiter.Resetter): with limits, each key's
// counter of each; without, every counter the tables hold for the keys.
// It locks the counters' rows as a consume does, so a consume under way
// lands wholly before or after it.
func (s *Store) Reset(ctx context.Context, keys []string, limits ...limiter.Limit) error {
	return s.engine.Reset(ctx, "mysql", keys, limits)
}

// List implements sqlstore.Lister.
func (b backend) List(ctx context.Context, keys []string) ([]*sqlstore.Counter, error) {
	rows, err := b.s.db.QueryContext(ctx, b.s.text.List(keys))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return sqlstore.ScanList(rows)
}
