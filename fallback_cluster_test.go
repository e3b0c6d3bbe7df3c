package ringlimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// blackhole is a TCP proxy in front of a node's gRPC listener. Frozen, it
// accepts connections and holds every byte, like a process stopped with
// SIGSTOP whose kernel still completes handshakes.
type blackhole struct {
	ln net.Listener
	// target is the node's gRPC address, known only once the node has
	// bound port 0; ready is closed when it is set. Binding the node's
	// own port 0 (rather than picking a free port, closing it and
	// binding it again) leaves no window for another test to take it.
	target string
	ready  chan struct{}
	closed chan struct{} // closed by close
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

// addBehindBlackhole adds a node to tc whose gRPC port peers reach only
// through a blackhole proxy (gossip is direct), so a test can freeze its
// gRPC traffic while it stays a live member. mod, if not nil, changes its
// Config.
func addBehindBlackhole(tc *testCluster, name string, mod func(*ringlimit.Config)) *blackhole {
	t := tc.t
	t.Helper()
	// The proxy must exist before the node advertises it; it learns
	// where to forward once the node has bound its own port. Connections
	// that arrive before then wait.
	bh := newBlackhole(t)
	n := tc.add(name, func(c *ringlimit.Config) {
		c.GRPCAddr, c.GRPCAdvertise = "127.0.0.1:0", bh.addr()
		if mod != nil {
			mod(c)
		}
	})
	bh.setTarget(n.GRPCAddr())
	return bh
}

// behindBlackholes starts n nodes (node-0 ...), each behind a blackhole
// proxy (holes[i] is tc.nodes[i]'s), mod applied to each Config when not
// nil, and waits until they see n members.
func behindBlackholes(t testing.TB, n int, mod func(*ringlimit.Config)) (*testCluster, []*blackhole) {
	t.Helper()
	tc := &testCluster{t: t}
	var holes []*blackhole
	for i := range n {
		holes = append(holes, addBehindBlackhole(tc, fmt.Sprintf("node-%d", i), mod))
	}
	tc.waitMembers(n)
	return tc, holes
}

func newBlackhole(t testing.TB) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, ready: make(chan struct{}), closed: make(chan struct{})}
	b.wg.Add(1)
	go b.serve()
	t.Cleanup(b.close)
	return b
}

func (b *blackhole) addr() string { return b.ln.Addr().String() }

func (b *blackhole) setTarget(addr string) {
	b.target = addr // published to serve's goroutines by close(ready)
	close(b.ready)
}

func (b *blackhole) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		if !b.track(c) {
			return
		}
		b.wg.Add(1)
		go b.connect(c)
	}
}

// connect dials the node for c once its address is known, and pipes both
// ways.
func (b *blackhole) connect(c net.Conn) {
	defer b.wg.Done()
	select {
	case <-b.ready:
	case <-b.closed:
		return
	}
	up, err := net.Dial("tcp", b.target)
	if err != nil {
		c.Close()
		return
	}
	if !b.track(up) {
		return
	}
	b.wg.Add(2)
	go b.pipe(up, c)
	go b.pipe(c, up)
}

// pipe copies until either side closes; while frozen it holds the bytes.
func (b *blackhole) pipe(dst, src net.Conn) {
	defer b.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for n > 0 && b.frozen.Load() {
			time.Sleep(5 * time.Millisecond)
			if b.isClosed() {
				return
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

// track records c to be closed by close; once closed it closes c at once
// and reports false.
func (b *blackhole) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.isClosed() {
		c.Close()
		return false
	}
	b.conns = append(b.conns, c)
	return true
}

func (b *blackhole) isClosed() bool {
	select {
	case <-b.closed:
		return true
	default:
		return false
	}
}

func (b *blackhole) close() {
	b.ln.Close()
	b.mu.Lock()
	close(b.closed)
	for _, c := range b.conns {
		c.Close()
	}
	b.conns = nil
	b.mu.Unlock()
	b.wg.Wait()
}

// With one node frozen (its gRPC traffic held, its gossip alive so it stays
// the owner of its keys), every call through the other nodes is answered
// by the policy once Timeout has passed (plus the machine's scheduling lag,
// measured beside the calls), the fallback is counted and named in the
// gRPC answer, the frozen peer is not hammered, and no goroutines pile up.
func TestFrozenOwnerEachPolicy(t *testing.T) {
	const timeout = 250 * time.Millisecond
	for _, policy := range []fallback.Policy{fallback.Deny, fallback.Allow, fallback.Local} {
		t.Run(policy.String(), func(t *testing.T) {
			tc, holes := behindBlackholes(t, 3, func(c *ringlimit.Config) {
				c.Fallback, c.FallbackSet, c.Timeout = policy, true, timeout
			})
			frozen := tc.nodes[2]
			var keys []string
			for i := 0; len(keys) < 20; i++ {
				if o, _ := frozen.Owner(fmt.Sprint("frozen-", i)); o == frozen.Name() {
					keys = append(keys, fmt.Sprint("frozen-", i))
				}
			}
			limit := limiter.Limit{Uses: 4, Window: time.Minute}
			ctx := context.Background()
			// Warm the connections, then freeze.
			for _, n := range tc.nodes[:2] {
				if _, err := n.ConsumeMany(ctx, []limiter.Entry{{Key: "warm-" + keys[0], Limit: limit}}); err != nil {
					t.Fatal(err)
				}
			}
			holes[2].frozen.Store(true)
			// A warm-up call slower than Timeout on a busy machine is a
			// fallback too: count from here.
			var fbBefore int64
			for _, n := range tc.nodes[:2] {
				fbBefore += n.Fallback().Stats().Fallbacks
			}
			baseGoroutines := runtime.NumGoroutine()
			rpcsBefore := tc.nodes[0].Peers().Stats().RPCs.Load() + tc.nodes[1].Peers().Stats().RPCs.Load()

			var slowest atomic.Int64
			var tookMu sync.Mutex
			var tooks []time.Duration
			var calls, allowed, failures atomic.Int64
			// The machine's own scheduling delay, measured beside the calls:
			// a goroutine that sleeps 10 ms records how late it wakes. A
			// shared 2-core machine can be late by tens of ms by itself.
			lag, stopLag := schedulingLag()
			var wg sync.WaitGroup
			for w := 0; w < 8; w++ {
				wg.Go(func() {
					n := tc.nodes[w%2]
					for i := 0; i < 25; i++ {
						start := time.Now()
						v, err := n.ConsumeMany(ctx, []limiter.Entry{{Key: keys[(w+i)%len(keys)], Limit: limit}})
						took := time.Since(start)
						tookMu.Lock()
						tooks = append(tooks, took)
						tookMu.Unlock()
						for {
							cur := slowest.Load()
							if int64(took) <= cur || slowest.CompareAndSwap(cur, int64(took)) {
								break
							}
						}
						calls.Add(1)
						if err != nil {
							t.Errorf("call through %s: %v (a policy must answer, not an error)", n.Name(), err)
							return
						}
						var fe *fallback.FailureError
						if errors.As(v.Failure, &fe) {
							failures.Add(1)
						}
						if v.Allowed {
							allowed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			stopLag()
			t.Logf("%v: %d calls, %d allowed, %d decided by the policy, slowest %v (the machine's own scheduling lag meanwhile: %v)",
				policy, calls.Load(), allowed.Load(), failures.Load(), time.Duration(slowest.Load()), lag())
			if len(tooks) == 0 {
				t.Fatal("no call finished")
			}
			// The policy answers once Timeout has passed on the node's
			// timers; what a call takes beyond that is the machine's
			// scheduling, which on a busy machine stacks up over the few
			// goroutines a call passes through. A policy that waited for
			// the frozen owner (a retry, a connect timeout, the caller's
			// deadline) would delay every call: the median call is held to
			// Timeout + 50 ms + the lag measured beside the calls, the
			// slowest to Timeout + 50 ms + 3 such lags.
			slices.Sort(tooks)
			median := tooks[len(tooks)/2]
			if max := timeout + 50*time.Millisecond + lag(); median > max {
				t.Errorf("the median call took %v, want at most Timeout + 50ms (+ %v the machine was late) = %v", median, lag(), max)
			}
			if max := timeout + 50*time.Millisecond + 3*lag(); time.Duration(slowest.Load()) > max {
				t.Errorf("slowest call took %v, want at most Timeout + 50ms (+ 3 x %v the machine was late) = %v", time.Duration(slowest.Load()), lag(), max)
			}
			if failures.Load() != calls.Load() {
				t.Errorf("%d of %d calls were decided by the policy, want all (their owner is frozen)", failures.Load(), calls.Load())
			}
			switch policy {
			case fallback.Deny:
				if allowed.Load() != 0 {
					t.Errorf("deny allowed %d calls", allowed.Load())
				}
			case fallback.Allow:
				if allowed.Load() != calls.Load() {
					t.Errorf("allow allowed %d of %d calls", allowed.Load(), calls.Load())
				}
			case fallback.Local:
				// Each of the two callers' nodes counts each key with the
				// limit shared across 3 members: ceil(4/3) = 2 per node.
				if want := int64(len(keys) * 2 * 2); allowed.Load() != want {
					t.Errorf("local allowed %d calls, want %d (2 per key per node)", allowed.Load(), want)
				}
			}
			var fb int64
			for _, n := range tc.nodes[:2] {
				fb += n.Fallback().Stats().Fallbacks
			}
			if fb -= fbBefore; fb != calls.Load() {
				t.Errorf("fallback metric counts %d, want %d", fb, calls.Load())
			}
			rpcs := tc.nodes[0].Peers().Stats().RPCs.Load() + tc.nodes[1].Peers().Stats().RPCs.Load() - rpcsBefore
			t.Logf("forward RPCs tried while frozen: %d for %d calls", rpcs, calls.Load())
			if rpcs*4 > calls.Load() {
				t.Errorf("%d forward RPCs for %d calls: the frozen peer is hammered, want backoff", rpcs, calls.Load())
			}
			if g := runtime.NumGoroutine(); g > baseGoroutines+20 {
				t.Errorf("%d goroutines after the calls, %d before: a pile-up", g, baseGoroutines)
			}
			// Over gRPC a verdict the policy decided says so (the chaos
			// suite's checker tells the owners' verdicts from the
			// fallback's by it); one the owner decided does not.
			client := pb.NewLimiterClient(dialPlain(t, tc.nodes[0].GRPCAddr()))
			var md metadata.MD
			if _, err := client.Consume(ctx, consumeReq(keys[0], limit.Uses, limiter.SlidingLog), grpc.Header(&md)); err != nil {
				t.Fatalf("gRPC Consume of a frozen owner's key: %v", err)
			}
			if got := md.Get(ringlimit.FallbackHeader); len(got) != 1 || got[0] != policy.String() {
				t.Errorf("%s header %q on a verdict the policy decided, want %q", ringlimit.FallbackHeader, got, policy.String())
			}
			own := ""
			for i := 0; own == ""; i++ {
				if o, _ := tc.nodes[0].Owner(fmt.Sprint("own-", i)); o == tc.nodes[0].Name() {
					own = fmt.Sprint("own-", i)
				}
			}
			md = nil
			if _, err := client.Consume(ctx, consumeReq(own, limit.Uses, limiter.SlidingLog), grpc.Header(&md)); err != nil {
				t.Fatalf("gRPC Consume of the node's own key: %v", err)
			}
			if got := md.Get(ringlimit.FallbackHeader); len(got) != 0 {
				t.Errorf("%s header %q on a verdict the owner decided, want none", ringlimit.FallbackHeader, got)
			}
			holes[2].frozen.Store(false)
		})
	}
}

// schedulingLag measures how late a sleeping goroutine wakes, until stop.
func schedulingLag() (lag func() time.Duration, stop func()) {
	var worst atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			start := time.Now()
			time.Sleep(10 * time.Millisecond)
			late := time.Since(start) - 10*time.Millisecond
			for {
				cur := worst.Load()
				if int64(late) <= cur || worst.CompareAndSwap(cur, int64(late)) {
					break
				}
			}
		}
	})
	return func() time.Duration { return time.Duration(worst.Load()) }, func() { close(done); wg.Wait() }
}

// A node that sees no majority of the members it knows does not take over
// the keys of members it cannot reach: calls for them follow the fallback
// policy, while its own keys are counted as before.
func TestMinorityFollowsFallback(t *testing.T) {
	tc := startCluster(t, 3, func(c *ringlimit.Config) { c.Fallback, c.FallbackSet = fallback.Deny, true })
	survivor := tc.nodes[0]
	var own, others []string
	for i := 0; len(own) < 5 || len(others) < 5; i++ {
		k := fmt.Sprint("minority-", i)
		if o, _ := survivor.Owner(k); o == survivor.Name() {
			own = append(own, k)
		} else {
			others = append(others, k)
		}
	}
	for _, n := range tc.nodes[1:] {
		ringlimit.Crash(n)
		tc.forget(n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		dead := 0
		for _, m := range survivor.Members() {
			if m.State == "dead" {
				dead++
			}
		}
		if dead == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the survivor did not see the two crashed nodes die")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx := context.Background()
	limit := limiter.Limit{Uses: 3, Window: time.Minute}
	// The survivor's router takes the last ring change a moment after its
	// membership shows it: poll until it routes as a minority.
	for deadline := time.Now().Add(5 * time.Second); ; {
		v, err := survivor.PeekMany(ctx, []limiter.Entry{{Key: others[0], Limit: limit}})
		if err == nil && v.Failure != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the survivor still decides %s itself 5 s after the others died", others[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, k := range others {
		v, err := survivor.ConsumeMany(ctx, []limiter.Entry{{Key: k, Limit: limit}})
		if err != nil || v.Allowed || v.Failure == nil {
			t.Fatalf("%s (owned by a crashed node) through the minority survivor: %+v %v; want the deny policy's refusal", k, v, err)
		}
	}
	for _, k := range own {
		v, err := survivor.ConsumeMany(ctx, []limiter.Entry{{Key: k, Limit: limit}})
		if err != nil || !v.Allowed || v.Failure != nil {
			t.Fatalf("%s (the survivor's own) : %+v %v; want counted normally", k, v, err)
		}
	}
}

// A client's Multi through a node meets the failure policy call by call:
// the calls for a frozen owner are denied (they travelled together, and
// fail together), the others are answered by their owners, and a call
// with bad input gets its own error.
func TestMultiFrozenOwnerPolicyPerCall(t *testing.T) {
	const timeout = 250 * time.Millisecond
	tc, holes := behindBlackholes(t, 3, func(c *ringlimit.Config) {
		c.Fallback, c.FallbackSet, c.Timeout = fallback.Deny, true, timeout
	})
	entry := func(k string) []*pb.Entry {
		return []*pb.Entry{{Key: []byte(k), Limit: &pb.Limit{Uses: 5, WindowMs: 60000}}}
	}
	byOwner := map[string][]string{}
	for i := 0; len(byOwner["node-0"]) < 2 || len(byOwner["node-1"]) < 2 || len(byOwner["node-2"]) < 3; i++ {
		k := fmt.Sprint("multi-", i)
		o, _ := tc.nodes[0].Owner(k)
		byOwner[o] = append(byOwner[o], k)
	}
	api := pb.NewLimiterClient(dialPlain(t, tc.nodes[0].GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Warm the connections to the owners, then freeze node-2.
	if _, err := api.Multi(ctx, &pb.MultiRequest{Calls: []*pb.Call{{Entries: entry("warm-1")}, {Entries: entry("warm-2")}, {Entries: entry("warm-3")}}}); err != nil {
		t.Fatal(err)
	}
	holes[2].frozen.Store(true)
	fb0 := tc.nodes[0].Fallback().Stats().Fallbacks
	var calls []*pb.Call
	want := []string{}
	for _, o := range []string{"node-2", "node-0", "node-1"} {
		for _, k := range byOwner[o][:min(len(byOwner[o]), 3)] {
			calls = append(calls, &pb.Call{Entries: entry(k)})
			want = append(want, o)
		}
	}
	calls = append(calls, &pb.Call{Entries: []*pb.Entry{{Key: []byte("bad"), Limit: &pb.Limit{Uses: 5, WindowMs: 0}}}})
	want = append(want, "bad")
	resp, err := api.Multi(ctx, &pb.MultiRequest{Calls: calls})
	if err != nil {
		t.Fatal(err)
	}
	frozen := 0
	for i, r := range resp.GetResults() {
		switch want[i] {
		case "bad":
			if codes.Code(r.GetError().GetCode()) != codes.InvalidArgument {
				t.Errorf("call %d (bad window): %v; want its own InvalidArgument", i, r)
			}
		case "node-2":
			frozen++
			if r.GetError() != nil || r.GetVerdict().GetAllowed() {
				t.Errorf("call %d (owner frozen): %v; want denied by the policy", i, r)
			}
		default:
			if r.GetError() != nil || !r.GetVerdict().GetAllowed() {
				t.Errorf("call %d (owner %s answers): %v; want allowed", i, want[i], r)
			}
		}
	}
	if got := tc.nodes[0].Fallback().Stats().Fallbacks - fb0; got < int64(frozen) {
		t.Errorf("node-0's policy decided %d calls, want at least the %d for the frozen owner", got, frozen)
	}
}
