package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/internal/leasehold"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// leaseTick is how often the client sends its lease traffic: returns of
// leases that ended or were spent, asks for new ones, releases of uses
// whose lease went back. An ask waits at most this long to leave.
const leaseTick = 2 * time.Millisecond

// leaseLength is the lease length the client asks for: long enough to
// outlast a renewal's round trip on a loaded machine, short enough that a
// node about to refuse a key whose uses are out on this client's leases
// waits little for their return when its recall cannot reach the client
// (owner.LeaseConfig.RecallTimeout).
const leaseLength = 200 * time.Millisecond

// clientLeases is the fleet client's side of leases (Config.Leases): a
// leasehold.Holder whose owners are the nodes (by address), and a
// LeaseRecalls stream to every node that granted it a lease, on which the
// node asks leases back before it refuses their keys.
type clientLeases struct {
	c *Client
	h *leasehold.Holder

	ctx    context.Context // ends at Close: the recall streams end
	cancel context.CancelFunc

	mu      sync.Mutex
	recalls map[string]bool // nodes (addresses) with a recall stream open, or refusing one
}

func newClientLeases(c *Client) *clientLeases {
	var b [8]byte
	_, _ = rand.Read(b[:])
	seed := uint64(0)
	for _, x := range b {
		seed = seed<<8 | uint64(x)
	}
	l := &clientLeases{c: c, recalls: map[string]bool{}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.h = leasehold.NewHolder(leasehold.HolderConfig{
		Name:      "client-" + hex.EncodeToString(b[:]),
		Table:     leasehold.Config{Now: time.Now, Length: leaseLength, Seed: seed},
		Transport: clientTransport{c},
		Tick:      leaseTick,
		Timeout:   c.cfg.Timeout,
		Granted:   l.openRecalls,
	})
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		<-c.stop
		l.h.Close() // every lease goes back before the connections close
		l.cancel()
	}()
	return l
}

// clientTransport carries the holder's traffic to the owner nodes.
type clientTransport struct{ c *Client }

func (t clientTransport) Owner(key string) (string, bool) {
	if n := t.c.ownerNode(key); n != nil {
		return n.addr, true
	}
	return "", false
}

func (t clientTransport) Exchange(ctx context.Context, addr string, tr leasehold.Traffic) ([]leasehold.Grant, error) {
	n := t.c.nodeAt(addr)
	if n == nil {
		return nil, errNoNode
	}
	resp, err := n.api.Lease(ctx, rpc.LeaseTrafficToPB(tr))
	if status.Code(err) == codes.Unimplemented { // a node without leases
		return nil, leasehold.ErrNoLeases
	}
	if err != nil {
		return nil, err
	}
	return rpc.LeaseGrantsFromPB(resp), nil
}

// openRecalls opens a recall stream to the node at addr, unless one is
// open (the holder calls it after each exchange that got a grant).
func (l *clientLeases) openRecalls(addr string) {
	l.mu.Lock()
	if l.recalls[addr] || l.ctx.Err() != nil {
		l.mu.Unlock()
		return
	}
	l.recalls[addr] = true
	l.mu.Unlock()
	n := l.c.nodeAt(addr)
	if n == nil {
		l.closedRecalls(addr, false)
		return
	}
	l.c.wg.Add(1)
	go func() {
		defer l.c.wg.Done()
		l.closedRecalls(addr, l.serveRecalls(n))
	}()
}

// closedRecalls notes that the recall stream to addr ended; keep says the
// node has none (the next grant does not open one again).
func (l *clientLeases) closedRecalls(addr string, keep bool) {
	if keep {
		return
	}
	l.mu.Lock()
	delete(l.recalls, addr)
	l.mu.Unlock()
}

// serveRecalls answers a node's recalls until the stream ends; true: the
// node has no recall stream (asking again is useless).
func (l *clientLeases) serveRecalls(n *clientNode) bool {
	st, err := n.api.LeaseRecalls(l.ctx)
	if err == nil {
		err = st.Send(&pb.LeaseRecallAnswer{Holder: l.h.Name()})
	}
	for err == nil {
		var m *pb.LeaseRecall
		if m, err = st.Recv(); err != nil {
			break
		}
		rets := l.h.Recall(m.GetIds())
		err = st.Send(&pb.LeaseRecallAnswer{Seq: m.GetSeq(), Returns: rpc.LeaseReturnsToPB(rets)})
	}
	return status.Code(err) == codes.Unimplemented
}

// LeaseStats counts a client's leases since Dial.
type LeaseStats struct {
	// Granted counts leases received; Returned those given back (Expired
	// those among them that ran out of time; Recalled those a node asked
	// back before a refusal).
	Granted, Returned, Expired, Recalled int64
	// Local counts calls decided from leases, without an RPC; Used the
	// uses they took.
	Local, Used int64
}

// LeaseStats returns the client's lease counters (zero when leases are
// off).
func (c *Client) LeaseStats() LeaseStats {
	if c.leases == nil {
		return LeaseStats{}
	}
	s := c.leases.h.Table().Stats()
	return LeaseStats{Granted: s.Granted.Load(), Returned: s.Returned.Load(), Expired: s.Expired.Load(), Recalled: s.Recalled.Load(), Local: s.Local.Load(), Used: s.Used.Load()}
}
