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
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc"
	"github.com/ringlimit/ringlimit/rpc/api"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// leaseTick is how often the client sends its lease traffic: returns of
// leases that ended or were spent, asks for new ones, releases of uses
// whose lease went back. An ask waits at most this long to leave.
const leaseTick = 2 * time.Millisecond

// leaseLength is the lease length the client asks for: long enough to
// outlast a renewal's round trip on a loaded machine, short enough that a
// node about to refuse a key whose uses are out on this client's leases
// (it cannot recall them from a client: the client returns them when they
// end) waits little for their return (owner.LeaseConfig.RecallTimeout).
const leaseLength = 200 * time.Millisecond

// clientLeases is the fleet client's side of leases (Config.Leases).
type clientLeases struct {
	c      *Client
	tbl    *leasehold.Table
	holder string

	mu    sync.Mutex
	asks  []pendingAsk
	rels  []leasehold.Release
	rets  []leasehold.Return // replaced by a new grant, not yet sent
	unimp map[string]bool    // nodes that answered Unimplemented
}

type pendingAsk struct {
	e   limiter.Entry
	ask leasehold.Ask
}

func newClientLeases(c *Client) *clientLeases {
	var b [8]byte
	_, _ = rand.Read(b[:])
	seed := uint64(0)
	for _, x := range b {
		seed = seed<<8 | uint64(x)
	}
	l := &clientLeases{c: c, holder: "client-" + hex.EncodeToString(b[:]), unimp: map[string]bool{}}
	l.tbl = leasehold.New(leasehold.Config{Now: time.Now, Length: leaseLength, Seed: seed})
	c.wg.Add(1)
	go l.loop()
	return l
}

// decide admits a single-entry consume from a lease when it can (ok);
// otherwise it counts the call toward asking for one, and the caller
// goes to the owner.
func (l *clientLeases) decide(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, bool) {
	if len(entries) != 1 || !leasehold.Leasable(entries[0]) {
		return limiter.Verdict{}, false
	}
	e := entries[0]
	// Every call counts toward the key's rate, and a lease a third spent
	// or a third over is renewed ahead, so calls keep finding one.
	id, ok, k, length, asking := l.tbl.TakeOrAsk(e, limiter.WantsRelease(ctx))
	if asking {
		l.mu.Lock()
		l.asks = append(l.asks, pendingAsk{e: e, ask: leasehold.Ask{Key: e.Key, Limit: e.Limit, K: k, Length: length}})
		l.mu.Unlock()
	}
	if ok {
		v := limiter.Verdict{Allowed: true, ResetAt: time.Now().Add(e.Limit.Window)}
		if limiter.WantsRelease(ctx) {
			var once sync.Once
			v.Release = func(context.Context) error {
				once.Do(func() {
					if !l.tbl.Give(e, id) {
						l.mu.Lock()
						l.rels = append(l.rels, leasehold.Release{Key: e.Key, Limit: e.Limit, ID: id, Cost: max(e.Cost, 1)})
						l.mu.Unlock()
					}
				})
				return nil
			}
		}
		return v, true
	}
	return limiter.Verdict{}, false
}

// loop sends the lease traffic every leaseTick until Close, then gives
// every lease back.
func (l *clientLeases) loop() {
	defer l.c.wg.Done()
	t := time.NewTicker(leaseTick)
	defer t.Stop()
	for {
		select {
		case <-l.c.stop:
			l.send(l.tbl.All())
			return
		case <-t.C:
			l.send(l.tbl.Due())
		}
	}
}

// nodeTraffic is what goes to one node in one Lease RPC.
type nodeTraffic struct {
	n    *clientNode
	req  *pb.LeaseRequest
	asks []pendingAsk
}

// send groups returns, releases and asks by owner node and sends them.
func (l *clientLeases) send(rets []leasehold.Return) {
	l.mu.Lock()
	asks, rels := l.asks, l.rels
	rets = append(rets, l.rets...)
	l.asks, l.rels, l.rets = nil, nil, nil
	l.mu.Unlock()
	if len(rets) == 0 && len(asks) == 0 && len(rels) == 0 {
		return
	}
	by := map[*clientNode]*nodeTraffic{}
	var order []*nodeTraffic
	get := func(key string) *nodeTraffic {
		n := l.c.ownerNode(key)
		if n == nil {
			return nil
		}
		t := by[n]
		if t == nil {
			t = &nodeTraffic{n: n, req: &pb.LeaseRequest{Holder: l.holder}}
			by[n] = t
			order = append(order, t)
		}
		return t
	}
	for _, r := range rets {
		// A return goes to the key's owner now (after a hand-off, the new
		// one); one that cannot go anywhere is dropped: its reservation
		// counts every use until it leaves the log.
		if t := get(r.Key); t != nil {
			t.req.Returns = append(t.req.Returns, api.LeaseReturnToPB(r))
		}
	}
	for _, r := range rels {
		if t := get(r.Key); t != nil {
			t.req.Releases = append(t.req.Releases, &pb.LeaseRelease{Key: []byte(r.Key), Limit: rpc.LimitToPB(r.Limit), Id: r.ID, Cost: r.Cost})
		}
	}
	for _, a := range asks {
		t := get(a.ask.Key)
		l.mu.Lock()
		skip := t == nil || l.unimp[t.n.addr]
		l.mu.Unlock()
		if skip {
			l.tbl.Failed(a.e)
			continue
		}
		t.asks = append(t.asks, a)
		t.req.Asks = append(t.req.Asks, &pb.LeaseAsk{Key: []byte(a.ask.Key), Limit: rpc.LimitToPB(a.ask.Limit), K: a.ask.K, LengthUs: a.ask.Length.Microseconds()})
	}
	var wg sync.WaitGroup
	for _, t := range order {
		wg.Go(func() { l.exchange(t) })
	}
	wg.Wait()
}

// exchange sends one node its traffic and installs the grants.
func (l *clientLeases) exchange(t *nodeTraffic) {
	ctx, cancel := context.WithTimeout(context.Background(), l.c.cfg.Timeout)
	defer cancel()
	sent := time.Now()
	resp, err := t.n.api.Lease(ctx, t.req)
	if err != nil {
		if status.Code(err) == codes.Unimplemented { // a node without leases
			l.mu.Lock()
			l.unimp[t.n.addr] = true
			l.mu.Unlock()
		}
		for _, a := range t.asks {
			l.tbl.Failed(a.e)
		}
		return
	}
	gs := resp.GetGrants()
	for i, a := range t.asks {
		g := leasehold.Grant{Key: a.ask.Key, Limit: a.ask.Limit}
		if i < len(gs) {
			g.ID, g.K, g.Owner = gs[i].GetId(), gs[i].GetK(), gs[i].GetOwner()
			g.Length = time.Duration(gs[i].GetLengthUs()) * time.Microsecond
		}
		if old, ok := l.tbl.Install(sent, g); ok {
			l.mu.Lock()
			l.rets = append(l.rets, old) // sent at the next tick
			l.mu.Unlock()
		}
		if g.K == 0 {
			l.tbl.Failed(a.e)
		}
	}
}

// LeaseStats counts a client's leases since Dial.
type LeaseStats struct {
	// Granted counts leases received; Returned those given back (Expired
	// those among them that ran out of time).
	Granted, Returned, Expired int64
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
	s := c.leases.tbl.Stats()
	return LeaseStats{Granted: s.Granted.Load(), Returned: s.Returned.Load(), Expired: s.Expired.Load(), Local: s.Local.Load(), Used: s.Used.Load()}
}
