package ringlimit

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testenv"
)

// A wake-up later than tick + threshold is logged with when the gap began
// and how long it was; wake-ups on time are not.
func TestStallWatchLogsLateWakeUps(t *testing.T) {
	var buf testenv.LogBuffer
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	// The watch reads the clock once at start, then once per tick.
	reads := []time.Duration{0, 5 * time.Millisecond, 10 * time.Millisecond, 70 * time.Millisecond, 75 * time.Millisecond, 375 * time.Millisecond}
	i := 0
	w := stallWatch{log: slog.New(slog.NewTextHandler(&buf, nil)), threshold: 50 * time.Millisecond, tick: 5 * time.Millisecond,
		now: func() time.Time { d := reads[i]; i++; return t0.Add(d) }}
	ticks, done := make(chan time.Time), make(chan struct{})
	finished := make(chan struct{})
	go func() { w.run(done, ticks); close(finished) }()
	for range len(reads) - 1 {
		ticks <- time.Time{}
	}
	close(done)
	<-finished
	lines := buf.Lines()
	// 10 -> 70 ms is 60 ms: more than 5 + 50. 75 -> 375 ms is 300 ms.
	want := []string{`since=2026-12-01T10:00:00.01Z for=60ms`, `since=2026-12-01T10:00:00.075Z for=300ms`}
	if len(lines) != len(want) {
		t.Fatalf("logged %q, want 2 stalls", lines)
	}
	for j, l := range lines {
		if !strings.Contains(l, `msg="ringlimit: process stalled"`) || !strings.Contains(l, want[j]) {
			t.Errorf("line %d %q, want %q", j, l, want[j])
		}
	}
}
