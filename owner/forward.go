package owner

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// peer is one other node: its connection and its forwarder.
type peer struct {
	name   string
	addr   string
	conn   *grpc.ClientConn
	client pb.PeerClient
	fwd    *rpc.Batcher
	// backUntil (unix ns): the member (re)joined the ring just now; until
	// then forwards wait for the connection to come up instead of failing
	// at once on the one its restart broke.
	backUntil atomic.Int64
	// mergesDeltas: the peer's last Replicate answer said it merges
	// sliding-log deltas (CounterState.delta).
	mergesDeltas atomic.Bool
}

// peer returns the peer for a member name, connecting on first use. A
// member whose address changed (a restart on another port) is redialled.
func (r *Router) peer(name string) (*peer, error) {
	addr, ok := r.cfg.Members.Addr(name)
	if !ok {
		// A node that asked for keys before this node saw it join.
		addr, ok = r.learned(name)
	}
	if !ok || addr == "" {
		return nil, fmt.Errorf("%w: no gRPC address for member %q", rpc.ErrUnavailable, name)
	}
	r.peersMu.Lock()
	defer r.peersMu.Unlock()
	if p := r.peers[name]; p != nil && p.addr == addr {
		return p, nil
	} else if p != nil {
		p.close()
	}
	if r.peersClosed {
		return nil, rpc.ErrShuttingDown
	}
	conn, err := r.cfg.Dial(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s (%s): %v", rpc.ErrUnavailable, name, addr, err)
	}
	p := &peer{name: name, addr: addr, conn: conn, client: pb.NewPeerClient(conn)}
	client := p.client
	p.fwd = rpc.NewBatcher(name,
		func(ctx context.Context, calls []*pb.Call) ([]*pb.CallResult, error) {
			var opts []grpc.CallOption
			if time.Now().UnixNano() < p.backUntil.Load() {
				opts = append(opts, waitReady)
			}
			resp, err := client.Forward(ctx, &pb.ForwardRequest{Calls: calls, From: r.self, RingVersion: r.ring().Version()}, opts...)
			return resp.GetResults(), err
		},
		func(ctx context.Context, rs []*pb.Receipt, elapsed time.Duration) error {
			// A late verdict's uses may have been recorded further along
			// than this peer (it passed the call on): give each back where
			// its receipt says.
			return r.releaseAt(ctx, name, rs, elapsed)
		},
		rpc.BatcherOptions{Timeout: r.cfg.ForwardTimeout, Logger: r.log, Stats: &r.fwdStats})
	r.peers[name] = p
	return p, nil
}

// PeerConn returns the connection this node forwards to member name on
// (made on first use, as for a forward), so a caller that checks whether
// the member is reachable checks the very connection calls travel on and
// opens no other. The router closes it (Close, or when the member's
// address changes); callers must not.
func (r *Router) PeerConn(name string) (*grpc.ClientConn, error) {
	p, err := r.peer(name)
	if err != nil {
		return nil, err
	}
	return p.conn, nil
}

// peerBack readies the connection to a member that (re)joined the ring: a
// node restarted at the same address must not wait out the backoffs its
// exit left behind.
func (r *Router) peerBack(name string) {
	r.peersMu.Lock()
	p := r.peers[name]
	r.peersMu.Unlock()
	if p != nil {
		p.backUntil.Store(time.Now().Add(time.Second).UnixNano())
		p.conn.ResetConnectBackoff()
		p.fwd.Reset()
	}
}

func (p *peer) close() {
	p.fwd.Close()
	_ = p.conn.Close()
}

// learn remembers a peer's gRPC address given in a request, for a peer
// this node's membership does not know yet.
func (r *Router) learn(name, addr string) {
	if name == "" || addr == "" {
		return
	}
	r.peersMu.Lock()
	if r.addrs == nil {
		r.addrs = map[string]string{}
	}
	r.addrs[name] = addr
	r.peersMu.Unlock()
}

func (r *Router) learned(name string) (string, bool) {
	r.peersMu.Lock()
	defer r.peersMu.Unlock()
	a, ok := r.addrs[name]
	return a, ok
}
