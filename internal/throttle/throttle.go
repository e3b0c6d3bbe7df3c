package throttle

import "time"

// Throttle decides which events of a run get a log line. The zero value
// is a throttle whose run has not started; Every must be set before use.
//
// It is not safe for concurrent use: its owner serialises Hit and Reset
// under the lock that also guards what the owner counts alongside, so one
// lock covers both.
type Throttle struct {
	// Every is the least time between two lines of one run.
	Every time.Duration

	started bool
	last    time.Time // when the last line was written
	skipped int64     // events since the last line that got none
}

// Hit records an event at now. It reports whether the event gets a line:
// the first event of a run does, and so does the first one at least Every
// after the last line; skipped is then the number of events since that
// line that got none. Other events get no line (ok false, skipped 0).
func (t *Throttle) Hit(now time.Time) (ok bool, skipped int64) {
	switch {
	case !t.started:
		t.started, t.last, t.skipped = true, now, 0
		return true, 0
	case now.Sub(t.last) >= t.Every:
		skipped = t.skipped
		t.last, t.skipped = now, 0
		return true, skipped
	default:
		t.skipped++
		return false, 0
	}
}

// Reset ends the run: the next event starts a new one and gets a line at
// once. Events not logged since the last line are forgotten.
func (t *Throttle) Reset() { t.started, t.skipped = false, 0 }

// Started reports whether a run is under way (an event since the last
// Reset).
func (t *Throttle) Started() bool { return t.started }
