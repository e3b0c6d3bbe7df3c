package cluster

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit/internal/sabotage"
	"github.com/ringlimit/ringlimit/ring"
)

// Routing is the view calls are routed by: it adapts a Cluster (set once
// joined) to what the protocol core asks of membership (owner.Membership,
// owner.LeftReporter and owner.RouteRing), and applies the majority rule
// to the ring calls are routed by. Membership itself does not route: the
// core asks this view.
//
// The majority rule: a node that cannot reach a majority of the members it
// knows (alive, suspect or dead; not those that left) is on the minority
// side of a partition, or nearly alone after crashes. It then routes by the
// ring of all known members, so it never takes over keys whose owners it
// merely cannot reach: calls for those fail fast to the fallback policy,
// and the majority side, which did take them over, stays the only one
// counting.
//
// What "reach" means is the point. memberlist's own view is stale on the
// cut-off side: it probes one member per interval, so right after a cut it
// still shows alive the members it has not probed yet, and when its first
// suspect is declared dead it could see 3 of 5 alive and take that
// member's keys. A member therefore counts only when memberlist says it is
// alive AND it answered this node's own gRPC probe (the prober: every
// member, every probe interval) sent less than freshFor ago. freshFor is
// three probe intervals, shorter than the fastest a cut-off node declares
// anyone dead (a probe timeout plus the suspicion timeout, at least 700 ms
// with the local profile and 4.5 s with LAN), so by the time a member dies
// in the cut-off node's view, no member it cannot reach still counts.
// Doubt (a starved peer that misses probes) errs on the side of the full
// ring, which costs fallbacks for the keys of dead members, never
// exactness.
//
// The verdict is re-evaluated when its evidence changes, not only on ring
// changes: at every probe round, and whenever the cluster's member states
// change (StateVersion). When the routing it implies changes, a
// signal on flips makes the node re-route as on a ring change (see join).
type Routing struct {
	c      atomic.Pointer[Cluster]
	probe  atomic.Pointer[prober]
	view   atomic.Pointer[verdict]
	quorum atomic.Pointer[quorumRing]
	// evalMu serialises evaluations, so views publish in order.
	evalMu sync.Mutex
	// flips gets a token (never blocking) when the routing the verdict
	// implies changed; capacity 1.
	flips chan struct{}
	// now reads the time probes are judged by (tests inject it).
	now func() time.Time
	// conn gives the prober the connection to a member (the router's).
	conn   func(name string) (*grpc.ClientConn, error)
	connMu sync.Mutex

	probeMu sync.Mutex
	stopped bool // stopProbing was called: start no prober
}

// SetConn sets how the prober reaches a member: the connection calls to
// it travel on (the node's peer client), which the prober does not close.
// Call it before StartProbing.
func (m *Routing) SetConn(conn func(name string) (*grpc.ClientConn, error)) {
	m.connMu.Lock()
	m.conn = conn
	m.connMu.Unlock()
}

// StartProbing starts the prober of c's members (see prober); a no-op
// after StopProbing, so a Close racing the join leaks no goroutine.
func (m *Routing) StartProbing(ctx context.Context, c *Cluster) {
	m.probeMu.Lock()
	defer m.probeMu.Unlock()
	if m.stopped || m.probe.Load() != nil {
		return
	}
	m.connMu.Lock()
	conn := m.conn
	m.connMu.Unlock()
	m.probe.Store(startProber(ctx, proberConfig{
		Interval: c.ProbeInterval(), Now: m.now, Conn: conn, Members: c.Members, Self: c.Local().Name,
		Round: func() { m.evaluate(true) },
	}))
}

// StopProbing stops the prober and waits for it. Without probes no other
// member counts toward a majority once their answers age out.
func (m *Routing) StopProbing() {
	m.probeMu.Lock()
	defer m.probeMu.Unlock()
	m.stopped = true
	if p := m.probe.Load(); p != nil {
		p.stop()
	}
}

// NewRouting returns a view with no cluster yet (Ring is nil until Set).
func NewRouting() *Routing {
	return &Routing{flips: make(chan struct{}, 1), now: time.Now}
}

// Flips gets a token (never blocking) when the routing the majority
// verdict implies changed without a ring change: the node then re-routes
// as on a ring change.
func (m *Routing) Flips() <-chan struct{} { return m.flips }

// verdict is one evaluation of the majority rule.
type verdict struct {
	states   uint64   // the cluster's StateVersion it was made from
	majority bool     // reachable members are more than half of known
	known    []string // members known (not left), sorted
	full     *ring.Ring
}

// Set gives the view its cluster, once joined.
func (m *Routing) Set(c *Cluster) { m.c.Store(c) }

// Cluster returns the cluster set, or nil before the join.
func (m *Routing) Cluster() *Cluster { return m.c.Load() }

// Ring is the ring calls are routed by (Route of the live ring).
func (m *Routing) Ring() *ring.Ring {
	c := m.Cluster()
	if c == nil {
		return nil
	}
	return m.Route(c.Ring())
}

// Route returns the ring to route by for a ring of live members: live
// when this node reaches a majority, else the ring of every member it
// knows. It does no network I/O: it reads the last verdict, re-evaluating
// it (from the member table and the recorded probe answers) only when the
// member states changed since; the prober re-evaluates each round.
func (m *Routing) Route(live *ring.Ring) *ring.Ring {
	c := m.Cluster()
	if c == nil || live == nil {
		return live
	}
	if sabotage.On(sabotage.Majority) {
		return live // test-only (internal/sabotage): no majority rule
	}
	v := m.view.Load()
	if v == nil || v.states != c.StateVersion() {
		v = m.evaluate(false)
	}
	if q := m.quorum.Load(); q != nil && q.live == live && q.v == v {
		return q.route
	}
	route := live
	if !v.majority && len(v.known) > live.Len() {
		if v.full != nil && v.full.Config() == live.Config() {
			route = v.full
		} else if full, err := ring.New(v.known, live.Config()); err == nil {
			route = full
		}
	}
	m.quorum.Store(&quorumRing{live: live, v: v, route: route})
	return route
}

// quorumRing caches the routing ring for one live ring and verdict.
type quorumRing struct {
	live, route *ring.Ring
	v           *verdict
}

// evaluate applies the majority rule to the member table and the probe
// answers as they are now, publishes the verdict, and signals flips when
// the routing it implies changed. It never blocks on the network. Unless
// forced (a probe round: the answers changed), a verdict made from the
// current member states is kept: callers of Route that all saw the same
// state change evaluate it once.
func (m *Routing) evaluate(force bool) *verdict {
	c := m.Cluster()
	m.evalMu.Lock()
	defer m.evalMu.Unlock()
	states := c.StateVersion() // before Members: a change meanwhile re-evaluates
	if old := m.view.Load(); !force && old != nil && old.states == states {
		return old
	}
	self := c.Local().Name
	p := m.probe.Load()
	now := m.now()
	v := &verdict{states: states}
	reach := 0
	for _, mem := range c.Members() {
		switch mem.State {
		case StateAlive:
			v.known = append(v.known, mem.Name)
			// A member memberlist still shows alive counts only with a
			// recent answer of its own: memberlist has not probed every
			// member lately (see membership).
			if mem.Name == self || (p != nil && p.answered(mem.Name, now)) {
				reach++
			}
		case StateSuspect, StateDead:
			// A suspect does not count towards a majority: on the cut-off
			// side every other member turns suspect before it is declared
			// dead, one by one.
			v.known = append(v.known, mem.Name)
		}
	}
	v.majority = reach*2 > len(v.known)
	old := m.view.Load()
	same := old != nil && old.majority == v.majority && slices.Equal(old.known, v.known)
	if same && old.states == v.states {
		return old // unchanged: Route's cache stays valid
	}
	if !v.majority && len(v.known) > 0 {
		if same && old.full != nil {
			v.full = old.full
		} else if live := c.Ring(); live != nil {
			v.full, _ = ring.New(v.known, live.Config())
		}
	}
	m.view.Store(v)
	if !same {
		select {
		case m.flips <- struct{}{}:
		default: // a re-route is pending; it will read this verdict
		}
	}
	return v
}

// Addr returns a member's gRPC address unless it is unknown or dead.
func (m *Routing) Addr(name string) (string, bool) {
	c := m.Cluster()
	if c == nil {
		return "", false
	}
	mem, ok := c.Member(name)
	// A member that is leaving still answers for the keys it hands off;
	// a dead one would only cost timeouts.
	if !ok || mem.GRPCAddr == "" || mem.State == StateDead {
		return "", false
	}
	return mem.GRPCAddr, true
}

// Left reports whether the member left gracefully (owner.LeftReporter).
func (m *Routing) Left(name string) bool {
	c := m.Cluster()
	if c == nil {
		return false
	}
	mem, ok := c.Member(name)
	return ok && mem.State == StateLeft
}
