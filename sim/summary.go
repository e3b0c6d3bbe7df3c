package sim

import (
	"bytes"
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Summary sums a range of seeds. Its JSON is the last line of the
// command sim/cmd/sim.
type Summary struct {
	Seeds           int     `json:"seeds"`
	Failed          int     `json:"failed"`
	FirstFailedSeed *uint64 `json:"first_failed_seed"`
	Calls           int     `json:"calls"`
	Admitted        int     `json:"admitted"`
	MaxExact        int     `json:"max_overshoot_exact"`
	MaxBound        int     `json:"max_overshoot_crash_bound"`
	// Known counts the failed seeds that are known open findings (the
	// command's -known list); they are in Failed too.
	Known int `json:"known_failed"`
}

// Add counts one seed's result.
func (s *Summary) Add(r *Result) {
	s.Seeds++
	s.Calls += r.Check.Calls
	s.Admitted += r.Check.Admitted
	s.MaxExact = max(s.MaxExact, r.Check.MaxExact)
	s.MaxBound = max(s.MaxBound, r.Check.MaxBound)
	if r.Failed() {
		s.Failed++
		if s.FirstFailedSeed == nil || r.Seed < *s.FirstFailedSeed {
			seed := r.Seed
			s.FirstFailedSeed = &seed
		}
	}
}

// RunSeeds runs seeds start..start+n-1 on workers goroutines (0: one per
// CPU) and calls each with every result, in seed order. stop ends the
// range early once it returns true (results already running are still
// reported).
func RunSeeds(start uint64, n, workers int, opt Options, each func(*Result) (stop bool)) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	type slot struct {
		done chan struct{}
		res  Result
	}
	slots := make([]*slot, n)
	for i := range slots {
		slots[i] = &slot{done: make(chan struct{})}
	}
	var mu sync.Mutex
	next, stopped := 0, false
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				halt := stopped
				mu.Unlock()
				if i >= n {
					return
				}
				if !halt {
					slots[i].res = Run(start+uint64(i), opt)
				} else {
					slots[i].res.Seed = ^uint64(0) // skipped
				}
				close(slots[i].done)
			}
		})
	}
	for i := range slots {
		<-slots[i].done
		if slots[i].res.Seed == ^uint64(0) {
			continue
		}
		if each(&slots[i].res) {
			mu.Lock()
			stopped = true
			mu.Unlock()
		}
	}
	wg.Wait()
}

// Replay is the command that runs seed alone again.
func Replay(seed uint64, nodes int, sabotage string) string {
	cmd := fmt.Sprintf("go run ./sim/cmd/sim -seeds 1 -start %d -nodes %d", seed, nodes)
	if sabotage != "" {
		cmd = "RINGLIMIT_SABOTAGE=" + sabotage + " " + cmd
	}
	return cmd
}

// Describe explains a failed seed: what broke, its plan's faults, and a
// compact trace of the failing key around the failure, from a second run
// with tracing on (which must give the same history: else that is
// reported too).
func Describe(r *Result, opt Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d FAILED: %d nodes, %d keys, limit %d per %v, %d calls, %d admitted\n",
		r.Seed, r.Plan.Nodes, len(r.Plan.Keys), r.Plan.Uses, r.Plan.Window, r.Check.Calls, r.Check.Admitted)
	if r.Err != nil {
		fmt.Fprintf(&b, "  run: %v\n", r.Err)
	}
	for _, f := range r.Check.Failures {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	for _, ev := range r.Events {
		fmt.Fprintf(&b, "  fault: %s %v at %.3fs", ev.Kind, ev.Nodes, ev.From.Seconds())
		if ev.To > 0 {
			fmt.Fprintf(&b, " until %.3fs", ev.To.Seconds())
		}
		if ev.Lag > 0 {
			fmt.Fprintf(&b, " (replication bound %v)", ev.Lag.Round(time.Millisecond))
		}
		b.WriteByte('\n')
	}
	if r.Check.Key == "" || r.Err != nil {
		return b.String()
	}
	opt.Trace = true
	again := Run(r.Seed, opt)
	if !bytes.Equal(again.History, r.History) {
		fmt.Fprintf(&b, "  NONDETERMINISTIC: the traced rerun gave another history (%d bytes, was %d)\n", len(again.History), len(r.History))
	}
	// The key's own events and every ring change, by time.
	lines := append(slices.Clone(again.Trace[r.Check.Key]), again.Trace[""]...)
	at := func(l string) (time.Duration, bool) {
		var sec float64
		if _, err := fmt.Sscanf(strings.TrimSpace(l), "%fs", &sec); err != nil {
			return 0, false
		}
		return time.Duration(sec * float64(time.Second)), true
	}
	slices.SortStableFunc(lines, func(a, b string) int {
		ta, _ := at(a)
		tb, _ := at(b)
		return cmp.Compare(ta, tb)
	})
	from, to := r.Check.At-r.Plan.Window/2, r.Check.At+3*r.Plan.Window/2
	var shown []string
	for _, l := range lines {
		if d, ok := at(l); ok && (d < from || d > to) {
			continue
		}
		shown = append(shown, l)
	}
	const most = 120
	fmt.Fprintf(&b, "  trace of key %s and ring changes from %.3fs to %.3fs (%d lines):\n", r.Check.Key, from.Seconds(), to.Seconds(), len(shown))
	if len(shown) > most {
		fmt.Fprintf(&b, "    ... %d earlier lines left out\n", len(shown)-most)
		shown = shown[len(shown)-most:]
	}
	for _, l := range shown {
		fmt.Fprintf(&b, "    %s\n", l)
	}
	return b.String()
}
