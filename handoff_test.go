package ringlimit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
)

// load drives calls over keys through random live nodes until stop is
// closed, and counts what each key was allowed.
type load struct {
	tc      *testCluster
	keys    []string
	limit   limiter.Limit
	allowed []atomic.Int64
	calls   atomic.Int64
	errs    atomic.Int64
	fallbck atomic.Int64
	shut    atomic.Int64
	mu      sync.Mutex
	errList []error
}

func newLoad(tc *testCluster, n int, limit limiter.Limit, prefix string) *load {
	l := &load{tc: tc, limit: limit, allowed: make([]atomic.Int64, n)}
	for i := 0; i < n; i++ {
		l.keys = append(l.keys, fmt.Sprintf("%s-%d", prefix, i))
	}
	return l
}

func (l *load) run(workers int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := i % len(l.keys)
				// Longer than the nodes' Timeout: the node must answer (with
				// the policy's verdict at worst), the caller never gives up.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				v, err := anyNode{l.tc}.ConsumeMany(ctx, []limiter.Entry{{Key: l.keys[k], Limit: l.limit}})
				cancel()
				l.calls.Add(1)
				switch {
				case isShuttingDown(err):
					l.shut.Add(1) // the call reached the node being removed
				case err != nil:
					l.errs.Add(1)
					l.mu.Lock()
					if len(l.errList) < 5 {
						l.errList = append(l.errList, err)
					}
					l.mu.Unlock()
				case v.Failure != nil:
					l.fallbck.Add(1)
					l.mu.Lock()
					if len(l.errList) < 5 {
						l.errList = append(l.errList, v.Failure)
					}
					l.mu.Unlock()
				case v.Allowed:
					l.allowed[k].Add(1)
				}
			}
		})
	}
	return &wg
}

// overshoot reports, per key, admissions beyond the limit. The whole test
// lies inside one window, so every admission of a key is in one window.
func (l *load) overshoot() (keys int, total, largest int64) {
	for i := range l.allowed {
		if over := l.allowed[i].Load() - l.limit.Uses; over > 0 {
			keys++
			total += over
			largest = max(largest, over)
		}
	}
	return
}

// Sustained calls on 1,000 keys while a 4th node joins and then one node
// leaves gracefully: no key admits more than its limit, and no call fails.
func TestHandOffJoinLeaveExact(t *testing.T) {
	// Deny, so that a call that times out on a loaded machine is refused,
	// never admitted by the fallback: any overshoot is then the hand-off's.
	deny := func(c *ringlimit.Config) {
		c.Fallback, c.FallbackSet, c.Timeout = fallback.Deny, true, 2*time.Second
	}
	tc := startCluster(t, 3, deny)
	// The whole test runs inside the 1-minute window, so a key's
	// admissions are all in one window: overshoot is admitted - limit.
	l := newLoad(tc, 1000, limiter.Limit{Uses: 5, Window: time.Minute}, "join-leave")
	tr := newTracer()
	for _, n := range tc.live() {
		tr.attach(n)
	}
	stop := make(chan struct{})
	wg := l.run(8, stop)
	time.Sleep(2 * time.Second)
	if os.Getenv("HO_ONLY") != "leave" {
		tr.attach(tc.add("node-3", deny))
		tc.waitMembers(4)
		time.Sleep(2 * time.Second)
	}
	if os.Getenv("HO_ONLY") != "join" {
		tc.remove(tc.live()[1])
		tc.waitMembers(len(tc.live()))
		time.Sleep(2 * time.Second)
	}
	close(stop)
	wg.Wait()
	keys, total, largest := l.overshoot()
	t.Logf("calls %d, errors %d, fallback verdicts %d, shutting-down answers from the leaving node %d, overshoot: %d keys, %d in total, %d at most",
		l.calls.Load(), l.errs.Load(), l.fallbck.Load(), l.shut.Load(), keys, total, largest)
	if l.errs.Load() != 0 || l.fallbck.Load()*100 > l.calls.Load() {
		t.Errorf("%d errors and %d fallback verdicts (timeouts) during join and graceful leave, want none and under 1%% (first: %v)", l.errs.Load(), l.fallbck.Load(), l.errList)
	}
	// The promise is zero: while two nodes' rings disagree, the node
	// already counting a key keeps it (a first-use fetch by the other is
	// answered "held", and its calls are passed on), so no two count it.
	if total > 0 {
		t.Errorf("overshoot on %d keys (total %d, largest %d), want none", keys, total, largest)
		t.Logf("ring changes: %s", tr.of(""))
		shown := 0
		for i := range l.allowed {
			if l.allowed[i].Load() > l.limit.Uses && shown < 3 {
				shown++
				t.Logf("admissions of %s: %s", l.keys[i], tr.of(l.keys[i]))
			}
		}
	}
	// The limit must have been reached for the check to mean anything.
	full := 0
	for i := range l.allowed {
		if l.allowed[i].Load() == l.limit.Uses {
			full++
		}
	}
	t.Logf("%d of %d keys reached their limit", full, len(l.keys))
	if full < 100 {
		t.Fatalf("only %d keys reached their limit: the load was too light to test anything", full)
	}
}

// offsetClock is the real clock shifted by a fixed offset.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.d) }

// Nodes whose clocks disagree by minutes still hand off exact counts: state
// travels as ages, never as clock readings.
func TestHandOffClockIndependence(t *testing.T) {
	offsets := []time.Duration{0, -7 * time.Minute, 11 * time.Minute, 3 * time.Hour}
	i := 0
	tc := startCluster(t, 3, func(c *ringlimit.Config) { c.Clock = offsetClock{offsets[i]}; i++ })
	ctx := context.Background()
	algs := []limiter.Algorithm{limiter.SlidingLog, limiter.SlidingWindow, limiter.TokenBucket, limiter.FixedWindow}
	// A fixed window counts a calendar year (UTC): it carries its calendar
	// across the wire, and no window ends during the test on any node's
	// clock, however far apart they are (but on New Year's Eve).
	limitOf := func(alg limiter.Algorithm) limiter.Limit {
		if alg == limiter.FixedWindow {
			return limiter.CalendarLimit(10, limiter.CalendarYear, nil)
		}
		return limiter.Limit{Algorithm: alg, Uses: 10, Window: time.Hour}
	}
	const keys = 200
	used := map[string]int64{}
	for k := 0; k < keys; k++ {
		for _, alg := range algs {
			key := fmt.Sprintf("clock-%d", k)
			l := limitOf(alg)
			n := int64(k%10 + 1)
			v, err := tc.nodes[k%3].ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: l, Cost: n}})
			if err != nil || !v.Allowed {
				t.Fatalf("consume %s: %+v %v", key, v, err)
			}
			used[key+"/"+alg.String()] = n
		}
	}
	check := func(stage string) {
		t.Helper()
		for k := 0; k < keys; k++ {
			for _, alg := range algs {
				key := fmt.Sprintf("clock-%d", k)
				l := limitOf(alg)
				n := tc.live()[k%len(tc.live())]
				v, err := n.PeekMany(ctx, []limiter.Entry{{Key: key, Limit: l}})
				if err != nil {
					t.Fatalf("%s: peek %s: %v", stage, key, err)
				}
				want := 10 - used[key+"/"+alg.String()] - 1
				if want < 0 {
					if v.Allowed {
						t.Fatalf("%s: %s %v allowed, want refused (all uses taken)", stage, key, alg)
					}
					continue
				}
				if !v.Allowed || v.Remaining != want {
					t.Fatalf("%s: %s %v: allowed %v remaining %d, want remaining %d after one more", stage, key, alg, v.Allowed, v.Remaining, want)
				}
			}
		}
	}
	check("before")
	tc.add("node-3", func(c *ringlimit.Config) { c.Clock = offsetClock{offsets[3]} })
	tc.waitMembers(4)
	waitQuiet(t, tc)
	check("after a join")
	tc.remove(tc.live()[0])
	tc.waitMembers(3)
	waitQuiet(t, tc)
	check("after a leave")
}

// waitQuiet polls until no node holds a counter it does not own.
func waitQuiet(t *testing.T, tc *testCluster) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		stray := 0
		for _, n := range tc.live() {
			stray += len(n.Router().Engine().Export(func(k string) bool {
				o, err := n.Owner(k)
				return err == nil && o != n.Name()
			}, false))
		}
		if stray == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nodes still hold counters they do not own")
}

// An owner that crashes (no hand-off) loses nothing that was replicated:
// its successors adopt the state. Without replication the counts are lost.
func TestReplicationSurvivesCrash(t *testing.T) {
	for _, replicas := range []int{1, -1} {
		t.Run(fmt.Sprintf("replicas=%d", max(replicas, 0)), func(t *testing.T) {
			tc := startCluster(t, 3, func(c *ringlimit.Config) { c.Replicas = replicas })
			ctx := context.Background()
			victim := tc.nodes[2]
			var keys []string
			for i := 0; len(keys) < 100; i++ {
				k := fmt.Sprintf("crash-%d", i)
				if o, _ := victim.Owner(k); o == victim.Name() {
					keys = append(keys, k)
				}
			}
			paris, err := limiter.LoadZone("Europe/Paris")
			if err != nil {
				t.Fatal(err)
			}
			// Each key under a sliding log and a fixed window (a calendar
			// year in Paris: its zone travels with the calls and the state).
			limits := []limiter.Limit{{Uses: 3, Window: time.Hour}, limiter.CalendarLimit(3, limiter.CalendarYear, paris)}
			for _, k := range keys {
				for _, l := range limits {
					for j := 0; j < 3; j++ {
						if v, err := tc.nodes[0].ConsumeMany(ctx, []limiter.Entry{{Key: k, Limit: l}}); err != nil || !v.Allowed {
							t.Fatalf("consume %s %v: %+v %v", k, l, v, err)
						}
					}
				}
			}
			if replicas > 0 {
				waitReplicated(t, tc, victim, len(keys)*len(limits))
			}
			ringlimit.Crash(victim)
			tc.forget(victim)
			tc.waitMembers(2)
			for _, l := range limits {
				lost := 0
				for _, k := range keys {
					// A verdict of the failure policy means the peeking node
					// still routes to the dead owner (its router takes the ring
					// change a moment after the membership shows it): ask again.
					var v limiter.Verdict
					for deadline := time.Now().Add(5 * time.Second); ; {
						var err error
						v, err = tc.nodes[1].PeekMany(ctx, []limiter.Entry{{Key: k, Limit: l}})
						if err != nil {
							t.Fatalf("peek %s: %v", k, err)
						}
						if v.Failure == nil {
							break
						}
						if time.Now().After(deadline) {
							t.Fatalf("peek %s: still a fallback verdict 5 s after the crash: %v", k, v.Failure)
						}
						time.Sleep(20 * time.Millisecond)
					}
					if v.Allowed {
						lost++
					}
				}
				t.Logf("replicas=%d, %v: %d of %d keys lost their counts when their owner crashed", max(replicas, 0), l, lost, len(keys))
				if replicas > 0 && lost != 0 {
					t.Fatalf("%v: %d of %d keys lost their counts with replication on, want 0", l, lost, len(keys))
				}
				if replicas < 0 && lost != len(keys) {
					t.Fatalf("%v: %d of %d keys lost with replication off; the contrast expects all", l, lost, len(keys))
				}
			}
		})
	}
}

// waitReplicated polls until the victim has shipped every change it
// recorded to its successors.
func waitReplicated(t *testing.T, tc *testCluster, victim *ringlimit.Node, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if victim.Router().ReplicationIdle() && victim.Router().Stats().Replicated.Load() >= int64(want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("victim still replicating after 5 s (%d counter states sent, want at least %d)", victim.Router().Stats().Replicated.Load(), want)
}

func TestCloseInFlight(t *testing.T) {
	tc := startCluster(t, 3, nil)
	n := tc.nodes[1]
	var wg sync.WaitGroup
	var ok, shut, other atomic.Int64
	stop := make(chan struct{})
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Longer than the node's Timeout: the node, not the caller,
				// must bound every call (by an answer, a policy verdict, or
				// the shutdown error).
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := n.ConsumeMany(ctx, []limiter.Entry{{Key: fmt.Sprintf("inflight-%d-%d", w, i), Limit: limiter.Limit{Uses: 5, Window: time.Minute}}})
				cancel()
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, limiter.ErrClosed), isShuttingDown(err):
					shut.Add(1)
				default:
					other.Add(1)
					t.Errorf("call during Close: %v", err)
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	tc.remove(n)
	close(stop)
	wg.Wait()
	t.Logf("during Close: %d answered, %d told the node is shutting down, %d other errors", ok.Load(), shut.Load(), other.Load())
	if shut.Load() == 0 {
		t.Errorf("no call saw the shutdown error; the test did not exercise Close under load")
	}
}

// tracer records where each use was admitted, to explain an overshoot.
type tracer struct {
	start time.Time
	mu    sync.Mutex
	m     map[string][]string
}

func newTracer() *tracer { return &tracer{start: time.Now(), m: map[string][]string{}} }

func (tr *tracer) attach(n *ringlimit.Node) {
	name := n.Name()
	n.Router().SetTrace(func(key, how string, v uint64) {
		if time.Since(tr.start) < 1500*time.Millisecond {
			return // before the first change: steady state
		}
		tr.mu.Lock()
		if strings.Contains(how, "[") {
			how = how[:strings.Index(how, "[")]
		}
		tr.m[key] = append(tr.m[key], fmt.Sprintf("%s@%.3fs(%s,ring %04x)", name, time.Since(tr.start).Seconds(), how, v&0xffff))
		tr.mu.Unlock()
	})
}

func (tr *tracer) of(key string) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return fmt.Sprint(tr.m[key])
}

// After a graceful leave, the new owner's first use of a key the leaver
// owned is decided from the hand-off: the leaver is gone, and a fetch from
// it must neither wait out the timeout nor hand the call to the fallback
// policy. With Allow as the policy, a fallback verdict would admit the full
// key; the hand-off's count refuses it.
func TestFirstUseAfterLeaveUsesHandOff(t *testing.T) {
	// Three nodes: the two left keep a majority however the third's leave
	// reaches them (a survivor of two that missed the leave would route
	// by both members, as after a crash). No replicas: they would answer
	// the fetch in the leaver's place, and hide what this checks.
	tc := startCluster(t, 3, func(c *ringlimit.Config) {
		c.Fallback, c.FallbackSet, c.Replicas = fallback.Allow, true, -1
	})
	n0, n1 := tc.nodes[0], tc.nodes[1]
	waitRingsAgree(t, tc)
	ctx := context.Background()
	lim := limiter.Limit{Uses: 2, Window: time.Hour}
	full, room := keyOwnedBy(t, n0, n1.Name(), "leave-full"), keyOwnedBy(t, n0, n1.Name(), "leave-room")
	for _, k := range []string{full, full, room} {
		if v, err := n0.ConsumeMany(ctx, []limiter.Entry{{Key: k, Limit: lim}}); err != nil || !v.Allowed {
			t.Fatalf("%s: %+v %v", k, v, err)
		}
	}
	tc.remove(n1)
	tc.waitMembers(2)
	waitRingsAgree(t, tc)
	fetchErrors := func() (n int64) {
		for _, x := range tc.live() {
			n += x.Router().Stats().FetchSourceErrors.Load()
		}
		return n
	}
	before := fetchErrors()
	if v, err := n0.ConsumeMany(ctx, []limiter.Entry{{Key: full, Limit: lim}}); err != nil || v.Allowed {
		t.Errorf("%s, at its limit when its owner left: %+v %v; want refused by the handed-off count", full, v, err)
	}
	if v, err := n0.ConsumeMany(ctx, []limiter.Entry{{Key: room, Limit: lim}}); err != nil || !v.Allowed || v.Remaining != 0 {
		t.Errorf("%s, one use of two when its owner left: %+v %v; want allowed with 0 remaining", room, v, err)
	}
	if d := fetchErrors() - before; d != 0 {
		t.Errorf("%d first-use fetch RPCs failed (to the node that left), want 0", d)
	}
}
