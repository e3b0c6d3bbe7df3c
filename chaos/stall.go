package chaos

import (
	"sync"
	"time"
)

// StallMonitor watches the harness's own scheduling: a goroutine that
// wakes every 5 ms and records each wake-up that came more than Threshold
// late. On a shared 2-core machine the whole host can stall (another job
// compiling); a call that overlaps such a stall was timed by a harness that
// was not running, so its latency says nothing about the cluster. Such
// calls are reported apart, never silently dropped.
type StallMonitor struct {
	h         *History
	threshold time.Duration
	mu        sync.Mutex
	stalls    []Fault
	done      chan struct{}
	wg        sync.WaitGroup
}

// NewStallMonitor starts watching; Stop ends it.
func NewStallMonitor(h *History, threshold time.Duration) *StallMonitor {
	m := &StallMonitor{h: h, threshold: threshold, done: make(chan struct{})}
	m.wg.Go(func() {
		const tick = 5 * time.Millisecond
		t := time.NewTicker(tick)
		defer t.Stop()
		last := h.Now()
		for {
			select {
			case <-m.done:
				return
			case <-t.C:
			}
			now := h.Now()
			if gap := now - last; gap > tick+m.threshold {
				m.mu.Lock()
				m.stalls = append(m.stalls, Fault{Kind: "stall", From: last, To: now})
				m.mu.Unlock()
			}
			last = now
		}
	})
	return m
}

// Stop ends the monitor and returns the stalls seen.
func (m *StallMonitor) Stop() []Fault {
	close(m.done)
	m.wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Fault(nil), m.stalls...)
}

// stalled reports whether c's interval overlaps a stall.
func stalled(c Call, stalls []Fault) bool {
	for _, s := range stalls {
		if c.Start <= s.To && c.End >= s.From {
			return true
		}
	}
	return false
}
