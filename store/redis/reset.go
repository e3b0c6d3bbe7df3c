package redis

import (
	"context"
	"fmt"

	"github.com/ringlimit/ringlimit/limiter"
)

// resetScript deletes its KEYS: one command, so a consume's script runs
// wholly before or after it.
const resetScript = "return {redis.call('DEL', unpack(KEYS))}"

var _ limiter.Resetter = (*Store)(nil)

// Reset forgets each key's counter of each limit (see limiter.Resetter):
// it deletes their Redis keys. A counter's Redis key holds its algorithm
// and window, and the store keeps no list of the windows a key was used
// with, so a reset without limits (every window of a key) returns an
// *limiter.UnsupportedError: name the limits. On a Redis Cluster without
// HashTag each counter is deleted by a command of its own.
func (s *Store) Reset(ctx context.Context, keys []string, limits ...limiter.Limit) error {
	if s.closed.Load() {
		return limiter.ErrClosed
	}
	if err := s.cfg.Bounds.CheckReset(keys, limits); err != nil {
		return err
	}
	if len(limits) == 0 {
		return &limiter.UnsupportedError{Store: "*redis.Store", Op: "reset every window of a key",
			Reason: "its Redis keys are named by algorithm and window and no list of them is kept; name the limits"}
	}
	rkeys := make([]string, 0, len(keys)*len(limits))
	for _, k := range keys {
		for _, l := range limits {
			rkeys = append(rkeys, s.keys.key(&limiter.Entry{Key: k, Limit: l}))
		}
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	groups := [][]string{rkeys}
	if s.cfg.Cluster && s.cfg.HashTag == "" {
		groups = groups[:0]
		for _, k := range rkeys {
			groups = append(groups, []string{k})
		}
	}
	for _, g := range groups {
		if _, err := s.cfg.Eval(ctx, resetScript, g, nil); err != nil {
			return fmt.Errorf("%w: reset: %w", ErrUnavailable, err)
		}
	}
	return nil
}
