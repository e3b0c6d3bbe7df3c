package chaos

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"
)

// Call is one recorded client call. Times are offsets on the harness's
// monotonic clock from the history's origin. The server decided the call at
// some instant inside [Start, End], on the owner's clock; nodes and harness
// share the machine's monotonic clock rate, so only that interval is known.
type Call struct {
	// Key is the limited key.
	Key string
	// Node is the name of the node the call was sent to.
	Node string
	// Start is when the call was sent; End when its answer (or error)
	// arrived.
	Start, End time.Duration
	// Answered is true when a verdict arrived (no error).
	Answered bool
	// Allowed is the verdict (false when not answered).
	Allowed bool
	// Fallback names the failure policy that decided the verdict (the
	// node's ringlimit-fallback header: the owner did not answer within
	// the node's Timeout), "" when the key's owner decided it.
	Fallback string
	// Err is the error kind when not answered: a gRPC status code name
	// ("Unavailable", "DeadlineExceeded", ...).
	Err string
	// Msg is the error's text.
	Msg string
}

// Latency is End - Start.
func (c Call) Latency() time.Duration { return c.End - c.Start }

// History records calls from many goroutines.
type History struct {
	origin time.Time
	mu     sync.Mutex
	calls  []Call
}

// NewHistory starts a history whose offsets count from origin.
func NewHistory(origin time.Time) *History { return &History{origin: origin} }

// Origin is the instant offsets count from.
func (h *History) Origin() time.Time { return h.origin }

// Since converts an instant to an offset.
func (h *History) Since(t time.Time) time.Duration { return t.Sub(h.origin) }

// Now is the current offset.
func (h *History) Now() time.Duration { return time.Since(h.origin) }

// Add records a call.
func (h *History) Add(c Call) {
	h.mu.Lock()
	h.calls = append(h.calls, c)
	h.mu.Unlock()
}

// Calls returns a copy of the calls, sorted by Start.
func (h *History) Calls() []Call {
	h.mu.Lock()
	out := append([]Call(nil), h.calls...)
	h.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// Fault is an interval during which a node was deliberately disturbed.
type Fault struct {
	// Kind names the fault ("kill", "stop", "leave", "restart",
	// "partition", "join").
	Kind string
	// Node is the disturbed node's name.
	Node string
	// From and To bound the fault (offsets); To is when the node answered
	// again (or the end of the run).
	From, To time.Duration
	// Excused is true when calls sent to Node during [From, To] are not
	// held to the answered-in-time promise (the node was killed, stopped or
	// shutting down). A partitioned node is not excused: the harness still
	// reaches it, and it must answer by its fallback policy.
	Excused bool
}

// excused reports whether c went to a node under an excused fault: its
// interval [Start, End] overlaps the fault's [From, To].
func excused(c Call, faults []Fault) bool {
	for _, f := range faults {
		if f.Excused && f.Node == c.Node && c.Start <= f.To && c.End >= f.From {
			return true
		}
	}
	return false
}

// WriteCSV writes calls as CSV (key,node,start_s,end_s,answered,allowed,err).
func WriteCSV(path string, calls []Call) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chaos: history: %w", err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "key,node,start_s,end_s,answered,allowed,err,fallback")
	for _, c := range calls {
		fmt.Fprintf(w, "%s,%s,%.6f,%.6f,%t,%t,%s,%s\n", c.Key, c.Node, c.Start.Seconds(), c.End.Seconds(), c.Answered, c.Allowed, c.Err, c.Fallback)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("chaos: history: %w", err)
	}
	return f.Close()
}
