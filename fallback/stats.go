package fallback

import (
	"log/slog"
	"sync/atomic"
)

const slogWarn = slog.LevelWarn

func errAttr(err error) slog.Attr { return slog.Any("err", err) }

type stats struct {
	timeouts, errors, overloaded        atomic.Int64
	fallbacks                           [numPolicies]atomic.Int64
	lateReleased, lateKept, lateNoCount atomic.Int64
	releaseErrors                       atomic.Int64
}

// Stats counts what a Store did, for metrics. Every field only grows.
type Stats struct {
	// Timeouts: calls the store did not answer within Timeout.
	Timeouts int64
	// Errors: calls the store answered with an error other than bad input.
	Errors int64
	// Overloaded: calls not sent because MaxPending calls were under way.
	Overloaded int64
	// Fallbacks: verdicts decided by the policy (the sum of the above).
	Fallbacks int64
	// LateReleased: late answers whose count was given back.
	LateReleased int64
	// LateKept: late answers whose count stays (the caller was let
	// through, or the store cannot release).
	LateKept int64
	// LateNoCount: late answers that recorded nothing (a refusal or an
	// error).
	LateNoCount int64
	// ReleaseErrors: releases of a late count that failed.
	ReleaseErrors int64
}

// Stats returns the counters so far.
func (s *Store) Stats() Stats {
	var fb int64
	for i := range s.stats.fallbacks {
		fb += s.stats.fallbacks[i].Load()
	}
	return Stats{
		Timeouts:      s.stats.timeouts.Load(),
		Errors:        s.stats.errors.Load(),
		Overloaded:    s.stats.overloaded.Load(),
		Fallbacks:     fb,
		LateReleased:  s.stats.lateReleased.Load(),
		LateKept:      s.stats.lateKept.Load(),
		LateNoCount:   s.stats.lateNoCount.Load(),
		ReleaseErrors: s.stats.releaseErrors.Load(),
	}
}

// Policy returns the store's failure policy.
func (s *Store) Policy() Policy { return s.cfg.Policy }

// Pending returns the calls under way on the wrapped store, late ones
// included.
func (s *Store) Pending() int { return len(s.sem) }
