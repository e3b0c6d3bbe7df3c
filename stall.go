package ringlimit

import (
	"log/slog"
	"time"
)

// watchStalls logs each time this process was not scheduled for longer
// than threshold, until the node closes (see stallWatch).
func (n *Node) watchStalls(threshold time.Duration) {
	defer n.wg.Done()
	w := stallWatch{log: n.log, threshold: threshold, tick: max(threshold/4, time.Millisecond), now: time.Now}
	t := time.NewTicker(w.tick)
	defer t.Stop()
	w.run(n.closing, t.C)
}

// stallWatch is a goroutine that wakes every tick and notes how late it
// woke. A starved process answers late whatever its Timeout says (the
// fallback's timer cannot fire while nothing runs), so its line ("ringlimit:
// process stalled", since when and for how long) tells the late answers the
// machine caused from those the node did; the chaos suite excuses calls to
// a node that overlap one.
type stallWatch struct {
	log             *slog.Logger
	threshold, tick time.Duration
	now             func() time.Time
}

func (w stallWatch) run(done <-chan struct{}, ticks <-chan time.Time) {
	last := w.now()
	for {
		select {
		case <-done:
			return
		case <-ticks:
		}
		now := w.now()
		if gap := now.Sub(last); gap > w.tick+w.threshold {
			w.log.Warn("ringlimit: process stalled", "since", last.UTC().Format(time.RFC3339Nano), "for", gap)
		}
		last = now
	}
}
