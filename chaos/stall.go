package chaos

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
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

// stalled reports whether c's lateness is the machine's: its interval
// overlaps a stall of the harness (Node ""), which then did not time it;
// or the stalls of the node c was sent to, clipped to c's interval, add up
// to at least the node's margin (deadline - timeout: what it had beyond its
// Timeout to answer) plus how late c was past the deadline. A node that ran
// for all but that long of the call could not have answered in time.
func stalled(c Call, stalls []Fault, deadline, timeout time.Duration) bool {
	var node time.Duration
	for _, s := range stalls {
		if c.Start > s.To || c.End < s.From {
			continue
		}
		if s.Node == "" {
			return true
		}
		if s.Node == c.Node {
			node += min(s.To, c.End) - max(s.From, c.Start)
		}
	}
	need := max(c.Latency()-deadline, 0)
	if timeout > 0 {
		need += max(deadline-timeout, 0)
	}
	return node > 0 && node >= need
}

// nodeStallThreshold is the nodes' --log-stalls. Below the harness's own
// 50 ms: a node's stalls only excuse a late call when together they cover
// its margin and lateness (stalled), and on a busy machine those come in
// pieces of a few tens of ms.
const nodeStallThreshold = 25 * time.Millisecond

// stallLine is a node's "process stalled" log line (serve --log-stalls).
var stallLine = regexp.MustCompile(`msg="ringlimit: process stalled" since=(\S+) for=(\S+)`)

// NodeStalls reads the stalls a node logged (it runs with --log-stalls:
// each time its own process was not scheduled for longer than that) from
// its log, as stalls of that node at offsets of h. A node that was not
// running cannot answer by its Timeout, whatever its fallback does, just
// as a stalled harness cannot time a call: late calls to the node that
// overlap one are reported apart.
func NodeStalls(h *History, node, logPath string) ([]Fault, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, fmt.Errorf("chaos: node stalls: %w", err)
	}
	defer f.Close()
	var out []Fault
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := stallLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		since, err1 := time.Parse(time.RFC3339Nano, m[1])
		d, err2 := time.ParseDuration(m[2])
		if err1 != nil || err2 != nil {
			continue
		}
		from := h.Since(since)
		out = append(out, Fault{Kind: "stall", Node: node, From: from, To: from + d})
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("chaos: node stalls: %s: %w", logPath, err)
	}
	return out, nil
}
