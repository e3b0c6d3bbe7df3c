package api

import (
	"context"
	"sync"
	"time"
)

// releases keeps the Release functions of client calls that asked for
// them, by id, until the call's uses have left their windows (a release
// after that gives nothing back, so the entry can go). It is bounded: past
// max entries the soonest-expiring half is dropped (those releases then
// give nothing back, as the uses were nearly gone).
type releases struct {
	mu   sync.Mutex
	next uint64
	max  int
	m    map[uint64]release
}

type release struct {
	fn      func(context.Context) error
	expires time.Time
}

func newReleases(max int) *releases {
	return &releases{max: max, m: map[uint64]release{}, next: uint64(time.Now().UnixNano())}
}

func (r *releases) put(fn func(context.Context) error, expires time.Time) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) >= r.max {
		now := time.Now()
		for id, e := range r.m {
			if e.expires.Before(now) || len(r.m) > r.max/2 {
				delete(r.m, id)
			}
		}
	}
	r.next++
	r.m[r.next] = release{fn: fn, expires: expires}
	return r.next
}

// release runs and forgets the release with id; an unknown id (released
// already, or expired) gives nothing back and is not an error.
func (r *releases) release(ctx context.Context, id uint64) error {
	r.mu.Lock()
	e, ok := r.m[id]
	delete(r.m, id)
	r.mu.Unlock()
	if !ok {
		return nil
	}
	return e.fn(ctx)
}
