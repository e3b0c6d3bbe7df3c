package throttle_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/throttle"
)

// A step table over named instants: which events get a line, and the
// count of those that did not.
func TestThrottle(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	th := throttle.Throttle{Every: 10 * time.Second}
	steps := []struct {
		at      time.Duration
		reset   bool // Reset before the event
		ok      bool
		skipped int64
	}{
		{0, false, true, 0}, // the first event of a run: at once
		{time.Second, false, false, 0},
		{5 * time.Second, false, false, 0},
		{10*time.Second - time.Nanosecond, false, false, 0},
		{10 * time.Second, false, true, 3}, // Every after the last line
		{11 * time.Second, false, false, 0},
		{12 * time.Second, true, true, 0}, // a new run: at once, the skipped one forgotten
		{13 * time.Second, false, false, 0},
		{40 * time.Second, false, true, 1},
		{40 * time.Second, false, false, 0},
	}
	for i, st := range steps {
		if st.reset {
			th.Reset()
			if th.Started() {
				t.Fatalf("step %d: Started() after Reset", i)
			}
		}
		ok, skipped := th.Hit(t0.Add(st.at))
		if ok != st.ok || skipped != st.skipped {
			t.Fatalf("step %d: Hit(t0+%v) = %v, %d, want %v, %d", i, st.at, ok, skipped, st.ok, st.skipped)
		}
		if !th.Started() {
			t.Fatalf("step %d: not Started() after Hit", i)
		}
	}
}
