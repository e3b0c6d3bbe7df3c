package limiter

import (
	"context"
	"sync"
)

// Call is one independent batch of a Calls: all of its entries pass or
// none does, whatever the other calls' verdicts.
type Call struct {
	Entries []Entry
	// Peek answers without recording (PeekMany).
	Peek bool
	// Release asks for a Verdict.Release (as WithRelease does).
	Release bool
}

// CallResult is one Call's answer: what ConsumeMany (or PeekMany) would
// have returned for it.
type CallResult struct {
	Verdict Verdict
	Err     error
}

// CallsStore is implemented by stores that decide many independent calls
// better together than one by one: a cluster node sends the calls for
// one owner in one message instead of one each.
//
// Calls answers calls[i] into out[i] (len(out) == len(calls)); it returns
// when every call is answered. It does not keep the slices.
type CallsStore interface {
	Calls(ctx context.Context, calls []Call, out []CallResult)
}

// DecideCalls answers independent calls on s: together through Calls
// when s is a CallsStore, else each call on its own, concurrently (one
// slow key does not hold up the others).
func DecideCalls(ctx context.Context, s Store, calls []Call, out []CallResult) {
	if cs, ok := s.(CallsStore); ok {
		cs.Calls(ctx, calls, out)
		return
	}
	EachCall(ctx, s, calls, out)
}

// EachCall answers independent calls on s one by one, concurrently: what
// DecideCalls does for a store that is not a CallsStore. A CallsStore
// that wraps one that is not falls back on it.
func EachCall(ctx context.Context, s Store, calls []Call, out []CallResult) {
	if len(calls) == 1 {
		out[0] = OneCall(ctx, s, calls[0])
		return
	}
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() { out[i] = OneCall(ctx, s, calls[i]) })
	}
	wg.Wait()
}

// OneCall answers one call on s.
func OneCall(ctx context.Context, s Store, c Call) CallResult {
	var r CallResult
	switch {
	case c.Peek:
		r.Verdict, r.Err = s.PeekMany(ctx, c.Entries)
	case c.Release:
		r.Verdict, r.Err = s.ConsumeMany(WithRelease(ctx), c.Entries)
	default:
		r.Verdict, r.Err = s.ConsumeMany(ctx, c.Entries)
	}
	return r
}
