package fallback

import (
	"context"
	"errors"

	"github.com/ringlimit/ringlimit/limiter"
)

var _ limiter.Resetter = (*Store)(nil)

// Reset forgets counters in the wrapped store (see limiter.Resetter),
// with no timeout of its own and no failure policy: an operator's reset
// either happens or says why not. Under the Local policy it also forgets
// them in the local store, so a user counted there during an outage is
// unlocked too. A wrapped store without Reset gives its
// *limiter.UnsupportedError.
func (s *Store) Reset(ctx context.Context, keys []string, limits ...limiter.Limit) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return limiter.ErrClosed
	}
	s.wg.Add(1)
	s.mu.RUnlock()
	defer s.wg.Done()
	if err := s.cfg.Bounds.CheckReset(keys, limits); err != nil {
		return err
	}
	var local error
	if s.local != nil {
		if err := limiter.Reset(ctx, s.local, keys, limits...); err != nil && !errors.Is(err, limiter.ErrUnsupported) {
			local = err
		}
	}
	return errors.Join(limiter.Reset(ctx, s.inner, keys, limits...), local)
}
