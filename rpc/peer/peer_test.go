package peer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/internal/codec"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/rpc/peer"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type staticMembers struct {
	ring  *ring.Ring
	addrs map[string]string
}

func (s *staticMembers) Ring() *ring.Ring { return s.ring }
func (s *staticMembers) Addr(name string) (string, bool) {
	a, ok := s.addrs[name]
	return a, ok
}

type node struct {
	router *owner.Router
	client *peer.Client
	addr   string
	srv    *grpc.Server
}

// startNodes runs one router per name, each serving the peer API on a real
// gRPC server on 127.0.0.1 and calling the others through peer.Client.
func startNodes(t testing.TB, names ...string) map[string]*node {
	t.Helper()
	return startNodesConfig(t, nil, names...)
}

// startNodesConfig is startNodes with set, when not nil, changing each
// router's configuration.
func startNodesConfig(t testing.TB, set func(*owner.Config), names ...string) map[string]*node {
	t.Helper()
	rg, err := ring.New(names, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[string]string{}
	lis := map[string]net.Listener{}
	for _, n := range names {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[n], addrs[n] = l, l.Addr().String()
	}
	dial := func(addr string) (*grpc.ClientConn, error) {
		// The codec a node uses (vtproto's code, not reflection).
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), codec.DialOption())
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	out := map[string]*node{}
	for _, n := range names {
		nd := &node{addr: addrs[n]}
		members := &staticMembers{ring: rg, addrs: addrs}
		nd.client, err = peer.NewClient(peer.ClientConfig{Self: n, Members: members, Dial: dial, Logger: quiet,
			Late: func(ctx context.Context, sentTo string, rs []owner.Receipt, elapsed time.Duration) error {
				return nd.router.ReleaseAt(ctx, sentTo, rs, elapsed)
			}})
		if err != nil {
			t.Fatal(err)
		}
		engine := limiter.NewMemory(limiter.MemoryConfig{})
		cfg := owner.Config{Self: n, SelfAddr: addrs[n], Members: members, Engine: engine, Peers: nd.client, Logger: quiet}
		if set != nil {
			set(&cfg)
		}
		nd.router, err = owner.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		nd.router.RingChanged(nil, rg)
		nd.router.Start()
		srv := grpc.NewServer(codec.ServerOption())
		nd.srv = srv
		pb.RegisterPeerServer(srv, peer.NewServer(nd.router, nd.client))
		go srv.Serve(lis[n])
		t.Cleanup(func() {
			nd.router.Close()
			nd.client.Close()
			srv.Stop()
			engine.Close()
		})
		out[n] = nd
	}
	return out
}

func keyOwnedBy(t testing.TB, rg *ring.Ring, owner string) string {
	t.Helper()
	for i := range 10000 {
		if k := fmt.Sprint("k-", i); func() bool { o, _ := rg.Owner(k); return o == owner }() {
			return k
		}
	}
	t.Fatal("no key")
	return ""
}

// A call through a node that does not own its key is decided at the
// owner, over gRPC, and a release travels back to it.
func TestForwardAndReleaseOverGRPC(t *testing.T) {
	ns := startNodes(t, "a", "b")
	a, b := ns["a"], ns["b"]
	k := keyOwnedBy(t, a.router.RoutingRing(), "b")
	lim := limiter.Limit{Uses: 3, Window: time.Minute}
	ctx := limiter.WithRelease(context.Background())
	var last limiter.Verdict
	for i := range 4 {
		v, err := a.router.ConsumeMany(ctx, []limiter.Entry{{Key: k, Limit: lim}})
		if err != nil || v.Allowed != (i < 3) {
			t.Fatalf("call %d: %+v %v; want allowed %v", i+1, v, err, i < 3)
		}
		if v.Allowed {
			last = v
		}
	}
	if got := a.client.Stats().Calls.Load(); got < 1 {
		t.Fatalf("a forwarded %d calls, want them all at b", got)
	}
	if last.Release == nil {
		t.Fatal("a forwarded use asked WithRelease came back without a Release")
	}
	if err := last.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := b.router.Engine().PeekMany(ctx, []limiter.Entry{{Key: k, Limit: lim}}); err != nil || !v.Allowed {
		t.Fatalf("at b after the release: %+v %v; want one use free", v, err)
	}
}

// A caller that will not give its uses back reads no receipts from a
// forward's answer (Call.NoReceipts); one that may gets the owner's.
func TestNoReceiptsInTime(t *testing.T) {
	ns := startNodes(t, "a", "b")
	a := ns["a"]
	k := keyOwnedBy(t, a.router.RoutingRing(), "b")
	entries := []limiter.Entry{{Key: k, Limit: limiter.Limit{Uses: 3, Window: time.Minute}}}
	res, err := a.client.Forward(t.Context(), "b", owner.Call{Entries: entries})
	if err != nil || res.Err != nil || !res.Verdict.Allowed || len(res.Receipts) != 1 || res.Receipts[0].Key != k || res.Receipts[0].Node != "b" || res.Receipts[0].Limit != entries[0].Limit {
		t.Fatalf("a forward that may be given back: %+v %v; want allowed with b's receipt of %s", res, err, k)
	}
	res, err = a.client.Forward(t.Context(), "b", owner.Call{Entries: entries, NoReceipts: true})
	if err != nil || res.Err != nil || !res.Verdict.Allowed || res.Receipts != nil {
		t.Fatalf("a forward with NoReceipts: %+v %v; want allowed, no receipts", res, err)
	}
	rs := a.client.ForwardMany(t.Context(), "b", []owner.Call{{Entries: entries, NoReceipts: true}, {Entries: entries}})
	if rs[0].Err != nil || rs[0].Receipts != nil || rs[1].Err != nil || len(rs[1].Receipts) != 0 || rs[1].Verdict.Allowed {
		t.Fatalf("ForwardMany, the third use without receipts, the fourth refused: %+v", rs)
	}
}

// A forward's receipts leave out what the asker sent (key, limit) and
// the answering node's name only when the asker says it completes them
// (lean_receipts), and only when they are its entries' own, one each in
// order; an asker that does not say so (an older version) gets them
// whole. The peer client completes them (TestNoReceiptsInTime).
func TestLeanReceipts(t *testing.T) {
	ns := startNodes(t, "a", "b")
	k := keyOwnedBy(t, ns["a"].router.RoutingRing(), "b")
	conn, err := grpc.NewClient(ns["b"].addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := pb.NewPeerClient(conn)
	entry := &pb.Entry{Key: []byte(k), Limit: &pb.Limit{Uses: 100, WindowMs: 60000}}
	for _, c := range []struct {
		name     string
		lean     bool
		entries  []*pb.Entry
		keyLimit bool // the receipt carries its key and limit
		node     bool // and its node
	}{
		{"an older asker", false, []*pb.Entry{entry}, true, true},
		{"lean", true, []*pb.Entry{entry}, false, false},
		{"lean, one key twice (one receipt)", true, []*pb.Entry{entry, entry}, true, false},
	} {
		resp, err := api.Forward(t.Context(), &pb.ForwardRequest{From: "a", LeanReceipts: c.lean, Calls: []*pb.Call{{Entries: c.entries}}})
		if err != nil {
			t.Fatal(err)
		}
		rs := resp.GetResults()[0].GetReceipts()
		if len(rs) != 1 {
			t.Fatalf("%s: %d receipts, want 1", c.name, len(rs))
		}
		r := rs[0]
		keyLimit := string(r.GetKey()) == k && r.GetLimit().GetUses() == 100
		if keyLimit != c.keyLimit || (!c.keyLimit && (r.GetKey() != nil || r.GetLimit() != nil)) || (r.GetNode() == "b") != c.node || (!c.node && r.GetNode() != "") {
			t.Errorf("%s: receipt key %q, limit %v, node %q; want key and limit %v, node %v", c.name, r.GetKey(), r.GetLimit(), r.GetNode(), c.keyLimit, c.node)
		}
		if r.GetAtUs() == 0 || r.GetId() == 0 {
			t.Errorf("%s: receipt %v lacks its id or clock", c.name, r)
		}
	}
}

// A state whose window no Duration holds is refused by the wire end,
// naming the field as it is on the wire.
func TestStateWindowRefusedNamingField(t *testing.T) {
	ns := startNodes(t, "a")
	conn, err := grpc.NewClient(ns["a"].addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = pb.NewPeerClient(conn).HandOff(t.Context(), &pb.StateRequest{From: "x", States: []*pb.CounterState{{Key: []byte("k"), WindowMs: 0}}})
	if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "states[0].window_ms") {
		t.Fatalf("HandOff with window_ms 0: %v; want InvalidArgument naming states[0].window_ms", err)
	}
}

// A draining node relays calls for keys it owns with ErrShuttingDown,
// which crosses the wire as a reason code and comes back matching the
// sentinel.
func TestShuttingDownCrossesAsReason(t *testing.T) {
	ns := startNodes(t, "a", "b")
	a, b := ns["a"], ns["b"]
	if err := b.router.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	k := keyOwnedBy(t, a.router.RoutingRing(), "b")
	res, err := a.client.Forward(t.Context(), "b", owner.Call{Entries: []limiter.Entry{{Key: k, Limit: limiter.Limit{Uses: 1, Window: time.Second}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res.Err, owner.ErrShuttingDown) || !errors.Is(res.Err, owner.ErrUnavailable) {
		t.Fatalf("a call to a draining owner: %v; want ErrShuttingDown within ErrUnavailable", res.Err)
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub)))
}

// A member restarted at the same address is called again at once once
// its rejoin is known (Rejoined): the next call dials afresh and waits for
// the connection, rather than fail fast on the backoffs the restart left
// on the old one.
func TestRejoinedRedials(t *testing.T) {
	ns := startNodes(t, "a", "b")
	a, b := ns["a"], ns["b"]
	k := keyOwnedBy(t, a.router.RoutingRing(), "b")
	call := owner.Call{Entries: []limiter.Entry{{Key: k, Limit: limiter.Limit{Uses: 100, Window: time.Minute}}}}
	if _, err := a.client.Forward(t.Context(), "b", call); err != nil {
		t.Fatalf("before the restart: %v", err)
	}
	b.srv.Stop() // b's process "dies": its port refuses
	if _, err := a.client.Forward(t.Context(), "b", call); err == nil {
		t.Fatal("a call to a stopped node succeeded")
	}
	lis, err := net.Listen("tcp", b.addr) // b comes back at the same address
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterPeerServer(srv, peer.NewServer(b.router, b.client))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	a.client.Rejoined("b")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if res, err := a.client.Forward(ctx, "b", call); err != nil || res.Err != nil || !res.Verdict.Allowed {
		t.Fatalf("the first call after the rejoin: %+v %v; want it answered", res, err)
	}
}
