package postgres

import (
	"context"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/store/internal/sqlstore"
)

var _ limiter.Resetter = (*Store)(nil)

// Reset forgets counters (see limiter.Resetter): with limits, each key's
// counter of each; without, every counter the tables hold for the keys.
// It takes the counters' advisory locks as a consume does, so a consume
// under way lands wholly before or after it.
func (s *Store) Reset(ctx context.Context, keys []string, limits ...limiter.Limit) error {
	return s.engine.Reset(ctx, "postgres", keys, limits)
}

// List implements sqlstore.Lister.
func (s *backend) List(ctx context.Context, keys []string) ([]*sqlstore.Counter, error) {
	bs := make([][]byte, len(keys))
	for i, k := range keys {
		bs[i] = []byte(k)
	}
	rows, err := s.pool.Query(ctx, s.q.list, bs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return sqlstore.ScanList(rows)
}
