package sim

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/owner"
	"github.com/ringlimit/ringlimit/ring"
)

// MemberConfig is how late views learn of changes (uniform in [min, max],
// drawn per observer and change, so views disagree while they catch up).
type MemberConfig struct {
	// Detect: a crashed or cut-off member is declared dead (memberlist's
	// probe timeout plus suspicion).
	DetectMin, DetectMax time.Duration
	// Learn: a join, a return after healing, a graceful leave.
	LearnMin, LearnMax time.Duration
	// Probe: the majority verdict follows reachability this late.
	ProbeMin, ProbeMax time.Duration
}

type memberState uint8

const (
	stateUnknown memberState = iota
	stateAlive
	stateDead
	stateLeft
)

// Membership is the simulated gossip: the truth (who is up, who left)
// and each node's view of it, which learns of changes late.
type Membership struct {
	s     *Scheduler
	net   *Network
	rng   *rand.Rand
	cfg   MemberConfig
	rcfg  ring.Config
	truth map[string]memberState
	views map[string]*View
	names []string              // every name ever seen, sorted
	rings map[string]*ring.Ring // by member list: rings are immutable, and New costs
	// Changes counts ring changes delivered to views.
	Changes int
}

// NewMembership returns an empty membership whose delays follow seed.
func NewMembership(s *Scheduler, net *Network, seed uint64, cfg MemberConfig, rcfg ring.Config) *Membership {
	return &Membership{s: s, net: net, rng: rand.New(rand.NewPCG(seed, 0x3e3)), cfg: cfg, rcfg: rcfg,
		truth: map[string]memberState{}, views: map[string]*View{}, rings: map[string]*ring.Ring{}}
}

// ring returns the ring of members (sorted), nil for none.
func (m *Membership) ring(members []string) *ring.Ring {
	k := strings.Join(members, ",")
	if r, ok := m.rings[k]; ok {
		return r
	}
	r, _ := ring.New(members, m.rcfg)
	m.rings[k] = r
	return r
}

// RingChanger receives a view's ring changes, in order, on a task of the
// node (owner.Router.RingChanged).
type RingChanger interface {
	RingChanged(prev, next *ring.Ring)
}

// View is one node incarnation's membership: an owner.Membership, an
// owner.LeftReporter and an owner.RouteRing (the majority rule).
type View struct {
	m        *Membership
	self     string
	rt       *Runtime
	state    map[string]memberState
	live     *ring.Ring
	known    *ring.Ring // alive or dead, not left: the majority rule's ring
	majority bool
	pending  [][2]*ring.Ring
	wake     *Signal
	core     RingChanger
	closed   bool
	// LastChange is when (virtual) the view's ring last changed.
	LastChange time.Duration
}

var (
	_ owner.Membership   = (*View)(nil)
	_ owner.LeftReporter = (*View)(nil)
	_ owner.RouteRing    = (*View)(nil)
)

// Form declares the initial cluster: its members know each other from
// the start (the cluster formed before the load began).
func (m *Membership) Form(names []string) {
	for _, n := range names {
		m.truth[n] = stateAlive
		if !slices.Contains(m.names, n) {
			m.names = append(m.names, n)
		}
	}
	slices.Sort(m.names)
}

// Join brings up an incarnation of name: its view learns the members it
// can reach at once (memberlist's join is a push-pull with a seed), the
// others learn of it late. core gets the first ring before any call.
func (m *Membership) Join(name string, rt *Runtime, core RingChanger) *View {
	m.truth[name] = stateAlive
	if !slices.Contains(m.names, name) {
		m.names = append(m.names, name)
		slices.Sort(m.names)
	}
	v := &View{m: m, self: name, rt: rt, state: map[string]memberState{name: stateAlive}, core: core, majority: true}
	for _, o := range m.names {
		if o != name && m.truth[o] != stateUnknown {
			v.state[o] = m.target(name, o)
		}
	}
	m.views[name] = v
	v.rebuild()
	rt.p.Go("ring changes", v.loop)
	for _, o := range m.names {
		if o != name {
			m.later(o, name, m.cfg.LearnMin, m.cfg.LearnMax)
		}
	}
	m.probeAll()
	return v
}

// Crash: name is gone without a word; views declare it dead late.
func (m *Membership) Crash(name string) {
	m.truth[name] = stateDead
	m.drop(name)
	for _, o := range m.names {
		if o != name {
			m.later(o, name, m.cfg.DetectMin, m.cfg.DetectMax)
		}
	}
	m.probeAll()
}

// Leave: name left gracefully; views learn it soon.
func (m *Membership) Leave(name string) {
	m.truth[name] = stateLeft
	for _, o := range m.names {
		if o != name {
			m.later(o, name, m.cfg.LearnMin, m.cfg.LearnMax)
		}
	}
	m.probeAll()
}

// Exit removes name's view (its process ended after a leave).
func (m *Membership) Exit(name string) { m.drop(name) }

func (m *Membership) drop(name string) {
	if v := m.views[name]; v != nil {
		v.closed = true
		delete(m.views, name)
	}
}

// Reachability changed (a cut or a heal): every pair looks again, late.
func (m *Membership) Reachability() {
	for _, a := range m.names {
		for _, b := range m.names {
			if a == b {
				continue
			}
			if m.target(a, b) == stateDead {
				m.later(a, b, m.cfg.DetectMin, m.cfg.DetectMax)
			} else {
				m.later(a, b, m.cfg.LearnMin, m.cfg.LearnMax)
			}
		}
	}
	m.probeAll()
}

// target is what observer obs would eventually believe of subj now: dead
// when subj is down or no path of up members joins them both ways
// (memberlist probes indirectly through a third member).
func (m *Membership) target(obs, subj string) memberState {
	switch m.truth[subj] {
	case stateLeft:
		return stateLeft
	case stateDead, stateUnknown:
		return stateDead
	}
	if m.net.Reachable(obs, subj) {
		return stateAlive
	}
	for _, z := range m.names {
		if z != obs && z != subj && m.truth[z] == stateAlive && m.net.Reachable(obs, z) && m.net.Reachable(z, subj) {
			return stateAlive
		}
	}
	return stateDead
}

func (m *Membership) delay(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(m.rng.Int64N(int64(hi-lo)))
}

// later has obs look at subj again after a delay in [lo, hi).
func (m *Membership) later(obs, subj string, lo, hi time.Duration) {
	v := m.views[obs]
	if v == nil {
		return
	}
	m.s.At(m.s.Now()+m.delay(lo, hi), func() {
		if v.closed {
			return
		}
		st := m.target(obs, subj)
		if v.state[subj] == st || (v.state[subj] == stateUnknown && st != stateAlive) {
			return
		}
		v.state[subj] = st
		v.rebuild()
	})
}

// probeAll re-evaluates every view's majority verdict, late.
func (m *Membership) probeAll() {
	for _, name := range m.names {
		v := m.views[name]
		if v == nil {
			continue
		}
		m.s.At(m.s.Now()+m.delay(m.cfg.ProbeMin, m.cfg.ProbeMax), func() {
			if !v.closed {
				v.rebuild()
			}
		})
	}
}

// rebuild recomputes the view's rings and verdict and queues a change
// for the core when either moved.
func (v *View) rebuild() {
	var live, known []string
	for _, n := range v.m.names {
		switch v.state[n] {
		case stateAlive:
			live = append(live, n)
			known = append(known, n)
		case stateDead:
			known = append(known, n)
		}
	}
	lr, kr := v.m.ring(live), v.m.ring(known)
	// The majority rule counts members this node can reach now (its own
	// probes), among those it knows.
	reach := 0
	for _, n := range live {
		if n == v.self || v.m.net.Reachable(v.self, n) {
			reach++
		}
	}
	maj := 2*reach > len(known)
	changed := v.live == nil || lr.Version() != v.live.Version() || maj != v.majority
	prev := v.live
	v.live, v.known, v.majority = lr, kr, maj
	if !changed {
		return
	}
	v.LastChange = v.m.s.Now()
	v.m.Changes++
	v.pending = append(v.pending, [2]*ring.Ring{prev, lr})
	if v.wake != nil {
		v.wake.Fire()
	}
}

// loop delivers ring changes to the core, in order.
func (v *View) loop() {
	for {
		for len(v.pending) > 0 && !v.closed {
			c := v.pending[0]
			v.pending = v.pending[1:]
			if v.core != nil {
				v.core.RingChanged(c[0], c[1])
			}
		}
		if v.closed {
			return
		}
		v.wake = v.m.s.NewSignal()
		if v.wake.Wait(context.Background()) != nil {
			return
		}
	}
}

// SetCore sets the receiver of ring changes (before the first is run).
func (v *View) SetCore(c RingChanger) { v.core = c }

// Idle reports whether every ring change was delivered.
func (v *View) Idle() bool { return len(v.pending) == 0 }

// Ring is the ring of the members the view holds alive.
func (v *View) Ring() *ring.Ring { return v.live }

// Addr names a member's address (its name) unless the view thinks it dead.
func (v *View) Addr(name string) (string, bool) {
	// As cluster.Routing.Addr: a member that left still answers for the
	// keys it hands off (until its process exits; then its port refuses);
	// only a dead one would cost timeouts.
	if st := v.state[name]; st == stateAlive || st == stateLeft {
		return name, true
	}
	return "", false
}

// Left reports whether the view saw name leave gracefully.
func (v *View) Left(name string) bool { return v.state[name] == stateLeft }

// Route is the majority rule: with no majority of the members it knows
// reachable, a node routes by all of them and takes over no keys of
// members it merely cannot reach.
func (v *View) Route(live *ring.Ring) *ring.Ring {
	if v.majority || v.known == nil {
		return live
	}
	return v.known
}

// Members lists the view's alive members (for traces).
func (v *View) Members() []string { return v.live.Members() }
