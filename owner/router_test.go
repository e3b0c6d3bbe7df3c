package owner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// staticMembers is a fixed ring: these tests are about routing, not
// membership, so the ring must not move under them.
type staticMembers struct {
	ring  *ring.Ring
	addrs map[string]string
}

func (s *staticMembers) Ring() *ring.Ring { return s.ring }
func (s *staticMembers) Addr(name string) (string, bool) {
	a, ok := s.addrs[name]
	return a, ok
}

// startRouters runs one Router per name, connected by a memNet (package
// rpc/peer's tests run routers over real gRPC), all on one static ring.
func startRouters(t testing.TB, names ...string) map[string]*Router {
	t.Helper()
	return startRoutersWith(t, nil, names...)
}

// startRoutersWith is startRouters with each router's Config changed by
// set.
func startRoutersWith(t testing.TB, set func(*Config), names ...string) map[string]*Router {
	t.Helper()
	rg, err := ring.New(names, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rings := map[string]*ring.Ring{}
	for _, n := range names {
		rings[n] = rg
	}
	return startRoutersConfig(t, rings, nil, set)
}

// startRoutersRings is startRouters with each router's own static ring
// (rings that disagree), and an optional earlier ring per router: the
// router then starts as if its ring had just changed from prev to its ring.
func startRoutersRings(t testing.TB, rings, prev map[string]*ring.Ring) map[string]*Router {
	t.Helper()
	return startRoutersConfig(t, rings, prev, nil)
}

func startRoutersConfig(t testing.TB, rings, prev map[string]*ring.Ring, set func(*Config)) map[string]*Router {
	t.Helper()
	addrs := map[string]string{}
	for n := range rings {
		addrs[n] = "mem:" + n
	}
	net := newMemNet()
	out := map[string]*Router{}
	var engines []*limiter.Memory
	// Routers close first (a closing router hands its counters to peers
	// that are still serving), then the engines.
	t.Cleanup(func() {
		for _, r := range out {
			r.Close()
		}
		for _, e := range engines {
			e.Close()
		}
	})
	for n, rg := range rings {
		engine := limiter.NewMemory(limiter.MemoryConfig{})
		cfg := Config{
			Self: n, SelfAddr: addrs[n], Members: &staticMembers{ring: rg, addrs: addrs}, Engine: engine,
			Peers: net.peers(n), Replication: 0, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		}
		if set != nil {
			set(&cfg)
		}
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if p := prev[n]; p != nil {
			r.RingChanged(nil, p)
		}
		r.RingChanged(prev[n], rg)
		r.Start()
		net.add(n, r)
		engines = append(engines, engine)
		out[n] = r
	}
	return out
}

// keyOwnedBy returns a key the ring gives to owner.
func keyOwnedBy(t *testing.T, r *Router, owner, prefix string) string {
	t.Helper()
	for i := 0; i < 10000; i++ {
		k := fmt.Sprintf("%s-%d", prefix, i)
		if o, _ := r.ring().Owner(k); o == owner {
			return k
		}
	}
	t.Fatalf("no key owned by %s", owner)
	return ""
}

// A refused batch gives back what its other parts recorded at the node
// that recorded them, even when a part was passed on and recorded further
// along than the node it was sent to. Here a's part went to b (a had
// handed the key to b on a first-use fetch, b's ring still says a owns
// it), b passed it back, and a recorded it: giving it back to b, as the
// rollback once did, freed nothing and left the use counted.
func TestRefusedBatchGivesBackWhereRecorded(t *testing.T) {
	rs := startRouters(t, "a", "b", "c")
	a := rs["a"]
	free := limiter.Limit{Uses: 5, Window: time.Minute}
	spent := limiter.Limit{Uses: 1, Window: time.Minute}
	kA := keyOwnedBy(t, a, "a", "free")
	kC := keyOwnedBy(t, a, "c", "spent")
	ctx := context.Background()
	if v, err := a.ConsumeMany(ctx, []limiter.Entry{{Key: kC, Limit: spent}}); err != nil || !v.Allowed {
		t.Fatalf("spend %s: %+v %v", kC, v, err)
	}
	a.custody.Give(kA, "b")

	v, err := a.ConsumeMany(ctx, []limiter.Entry{{Key: kA, Limit: free}, {Key: kC, Limit: spent}})
	if err != nil || v.Allowed {
		t.Fatalf("batch: %+v %v; want refused", v, err)
	}
	for _, n := range []string{"a", "b"} {
		v, err := rs[n].engine.PeekMany(ctx, []limiter.Entry{{Key: kA, Limit: free, Cost: 5}})
		if err != nil || !v.Allowed {
			t.Errorf("%s at %s after the refused batch: %+v %v; want all 5 uses free", kA, n, v, err)
		}
	}
}

// When rings disagree, a new owner's first-use fetch can be answered
// "counted here" by a node whose ring still gives it the key: the new owner
// then passes its calls on to that node instead of counting them too, and
// counts the answer in FetchHeld (ringlimit_fetch_held_total).
func TestFetchHeldPassesCallsOn(t *testing.T) {
	solo, err := ring.New([]string{"a"}, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	both, err := ring.New([]string{"a", "b"}, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// a has not seen b join; b has, and takes keys over from a.
	rs := startRoutersRings(t, map[string]*ring.Ring{"a": solo, "b": both}, map[string]*ring.Ring{"b": solo})
	a, b := rs["a"], rs["b"]
	k := keyOwnedBy(t, b, "b", "held")
	limit := limiter.Limit{Uses: 2, Window: time.Minute}
	ctx := context.Background()
	for i := range 3 {
		v, err := b.ConsumeMany(ctx, []limiter.Entry{{Key: k, Limit: limit}})
		if err != nil || v.Allowed != (i < 2) {
			t.Fatalf("call %d through b: %+v %v; want allowed %v (one count, at a)", i+1, v, err, i < 2)
		}
	}
	if got := b.stats.FetchHeld.Load(); got != 1 {
		t.Errorf("b's FetchHeld = %d, want 1 (a answered that it counts %s)", got, k)
	}
	if v, err := a.engine.PeekMany(ctx, []limiter.Entry{{Key: k, Limit: limit}}); err != nil || v.Allowed {
		t.Errorf("%s at a: %+v %v; want its 2 uses counted there", k, v, err)
	}
	if v, err := b.engine.PeekMany(ctx, []limiter.Entry{{Key: k, Limit: limit, Cost: 2}}); err != nil || !v.Allowed {
		t.Errorf("%s at b: %+v %v; want nothing counted there", k, v, err)
	}
}

// A last-hop call (one that must be counted where it lands) that reaches a
// node while that node is handing its key off — the state exported into the
// outbox, the HandOff RPC in flight — waits for the hand-off and follows the
// key to its owner. Counted where it landed, it went into an engine without
// the key's uses: one use over the limit, as the chaos suite's rolling
// restarts showed (CHAOS.md).
func TestLastHopDuringHandOffFollowsTheKey(t *testing.T) {
	rs := startRouters(t, "a", "b")
	a, b := rs["a"], rs["b"]
	k := keyOwnedBy(t, a, "a", "moving")
	limit := limiter.Limit{Uses: 2, Window: time.Minute}
	ctx := context.Background()
	// b counted the key's two uses (as an owner under an older ring), and
	// is now handing it to a: the state leaves the engine for the outbox.
	for range 2 {
		if v, err := b.engine.ConsumeMany(ctx, []limiter.Entry{{Key: k, Limit: limit}}); err != nil || !v.Allowed {
			t.Fatalf("b's use: %+v %v", v, err)
		}
	}
	var states []limiter.CounterState
	b.exclusive(func() {
		states = b.engine.Export(func(key string) bool { return key == k }, true)
		b.outbox.Import(states)
	})
	if len(states) != 1 {
		t.Fatalf("exported %d states, want 1", len(states))
	}
	handedOff := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond) // the hand-off RPC is slow
		err := b.sendStates("a", states, true, true, b.ring().Version())
		if err == nil {
			b.custody.Handed(k, "a")
		}
		b.takeFromOutbox(states, err != nil)
		handedOff <- err
	}()

	res := b.Serve(ctx, "a", []Call{{Entries: []limiter.Entry{{Key: k, Limit: limit}}, Final: true, Timeout: 2 * time.Second}})[0]
	if err := <-handedOff; err != nil {
		t.Fatalf("hand-off: %v", err)
	}
	if res.Err != nil || res.Verdict.Allowed {
		t.Errorf("last hop during the hand-off: %+v; want refused (the key's 2 uses are spent)", res)
	}
	if v, err := b.engine.PeekMany(ctx, []limiter.Entry{{Key: k, Limit: limit, Cost: 2}}); err != nil || !v.Allowed {
		t.Errorf("b's engine after the hand-off: %+v %v; want nothing left behind", v, err)
	}
}

// A forwarded batch whose keys this node's ring gives to several owners is
// split (hop rule 3): each key is counted at its owner, none where the
// batch landed, and the receipts name the node that recorded each use, so
// a release frees them there. (Counted where it landed, as before the
// simulator found it, b held both keys.)
func TestForwardedBatchIsSplit(t *testing.T) {
	rs := startRouters(t, "a", "b", "c")
	a, b, c := rs["a"], rs["b"], rs["c"]
	lim := limiter.Limit{Uses: 1, Window: time.Minute}
	kA, kC := keyOwnedBy(t, b, "a", "split-a"), keyOwnedBy(t, b, "c", "split-c")
	ctx := context.Background()
	res := b.Serve(ctx, "a", []Call{{Entries: []limiter.Entry{{Key: kA, Limit: lim}, {Key: kC, Limit: lim}}, Hops: 1}})[0]
	if res.Err != nil || !res.Verdict.Allowed || len(res.Receipts) != 2 {
		t.Fatalf("split batch: %+v; want allowed with 2 receipts", res)
	}
	for _, k := range []struct {
		r   *Router
		key string
	}{{a, kA}, {c, kC}} {
		if v, _ := k.r.engine.PeekMany(ctx, []limiter.Entry{{Key: k.key, Limit: lim}}); v.Allowed {
			t.Errorf("%s at its owner after the split batch: allowed; want its use counted there", k.key)
		}
		if v, _ := b.engine.PeekMany(ctx, []limiter.Entry{{Key: k.key, Limit: lim}}); !v.Allowed {
			t.Errorf("%s at b, where the batch landed: counted there too", k.key)
		}
	}
	if err := a.ReleaseAt(ctx, "b", res.Receipts, 0); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		r   *Router
		key string
	}{{a, kA}, {c, kC}} {
		if v, _ := k.r.engine.PeekMany(ctx, []limiter.Entry{{Key: k.key, Limit: lim}}); !v.Allowed {
			t.Errorf("%s at its owner after the release: still counted", k.key)
		}
	}
}
