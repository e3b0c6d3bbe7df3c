package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
)

// Server is what the simulated transport delivers to on a node: the
// server side of its protocol core (owner.Router's Serve methods; see
// core.go for the adapter).
type Server interface {
	Serve(ctx context.Context, from string, calls []owner.Call) []owner.Result
	ServeFetch(ctx context.Context, req owner.FetchRequest) owner.FetchAnswer
	ServeHandOff(ctx context.Context, b owner.StateBatch) (owner.StateAck, error)
	ServeReplicate(ctx context.Context, b owner.StateBatch) (owner.StateAck, error)
	ServeRelease(ctx context.Context, rs []owner.Receipt, elapsed time.Duration) error
	ServeInvalidate(ctx context.Context, keys []string)
}

// NetConfig is the network's fault mix. Probabilities are per message.
type NetConfig struct {
	// Delay is the least one-way latency; Jitter the most added to it
	// (uniform). Long is the probability of a long delay, up to LongMax
	// more (a congested link, a retransmission).
	Delay, Jitter time.Duration
	Long          float64
	LongMax       time.Duration
	// Drop is the probability that a request, or a reply after its
	// target processed the request, is lost: the caller waits out its
	// context.
	Drop float64
	// Reset is the probability that an RPC fails at once with
	// owner.ErrUnavailable (a connection reset) without reaching its
	// target.
	Reset float64
	// Dup is the probability that a request that may be repeated without
	// harm to the promises (Forward: it can only count more; HandOff: a
	// merge; Invalidate, and Release of uses removed by id: idempotent)
	// is delivered twice.
	Dup float64
}

// Network delivers requests between node incarnations with seeded
// delays, losses, duplicates and cuts. Methods are called by tasks or by
// the driver, never concurrently (the scheduler runs one at a time).
type Network struct {
	s    *Scheduler
	rng  *rand.Rand
	cfg  NetConfig
	eps  map[string]*endpoint
	cut  map[[2]string]bool // from, to: requests and replies that way are lost
	slow map[string]time.Duration
	// Stats.
	Sent, Lost, Resets, Dups, Late int
}

type endpoint struct {
	name string
	rt   *Runtime
	srv  Server
}

// NewNetwork returns a network whose faults follow seed.
func NewNetwork(s *Scheduler, seed uint64, cfg NetConfig) *Network {
	return &Network{s: s, rng: rand.New(rand.NewPCG(seed, 0x0e7)), cfg: cfg,
		eps: map[string]*endpoint{}, cut: map[[2]string]bool{}, slow: map[string]time.Duration{}}
}

// Attach makes srv, on rt's proc, the node name's incarnation.
func (n *Network) Attach(name string, rt *Runtime, srv Server) {
	n.eps[name] = &endpoint{name: name, rt: rt, srv: srv}
}

// Detach removes name's incarnation (it crashed or exited).
func (n *Network) Detach(name string) { delete(n.eps, name) }

// Cut loses every message from -> to until Heal (one way).
func (n *Network) Cut(from, to string) { n.cut[[2]string{from, to}] = true }

// Heal ends every cut.
func (n *Network) Heal() { clear(n.cut) }

// Reachable reports whether messages flow both ways between a and b.
func (n *Network) Reachable(a, b string) bool {
	return !n.cut[[2]string{a, b}] && !n.cut[[2]string{b, a}]
}

// SetSlow adds extra latency to every message to or from name (0 ends it).
func (n *Network) SetSlow(name string, extra time.Duration) {
	if extra <= 0 {
		delete(n.slow, name)
		return
	}
	n.slow[name] = extra
}

func (n *Network) delay(from, to string) time.Duration {
	d := n.cfg.Delay
	if n.cfg.Jitter > 0 {
		d += time.Duration(n.rng.Int64N(int64(n.cfg.Jitter)))
	}
	if n.cfg.Long > 0 && n.cfg.LongMax > 0 && n.rng.Float64() < n.cfg.Long {
		d += time.Duration(n.rng.Int64N(int64(n.cfg.LongMax)))
	}
	if x := n.slow[from] + n.slow[to]; x > 0 {
		d += time.Duration(n.rng.Int64N(int64(x)))
	}
	return max(d, time.Microsecond)
}

func (n *Network) chance(p float64) bool { return p > 0 && n.rng.Float64() < p }

// rpcCall is one request in flight.
type rpcCall struct {
	sig       *Signal
	val       any
	err       error
	done      bool
	abandoned bool // the caller's context ended first
	cancel    context.CancelFunc
}

// handler runs on the target, in a task of its own.
type handler func(ctx context.Context, srv Server) (any, error)

// call sends a request from -> to and waits for its answer or ctx. A
// late answer goes to late (on the caller's proc) when set.
func (n *Network) call(ctx context.Context, from *Runtime, fromName, to, kind string, dupOK bool, h handler, late func(any)) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sim: %s to %s: %w", kind, to, err)
	}
	s := n.s
	n.Sent++
	ep := n.eps[to]
	rc := &rpcCall{sig: s.NewSignal()}
	d := n.delay(fromName, to)
	switch {
	case ep == nil:
		// Nobody listens: the connection is refused.
		s.At(s.Now()+d, func() {
			n.answer(rc, nil, fmt.Errorf("%w: sim: %s to %s: connection refused", owner.ErrUnavailable, kind, to))
		})
	case n.chance(n.cfg.Reset):
		n.Resets++
		s.At(s.Now()+d, func() {
			n.answer(rc, nil, fmt.Errorf("%w: sim: %s to %s: connection reset", owner.ErrUnavailable, kind, to))
		})
	case n.cut[[2]string{fromName, to}] || n.chance(n.cfg.Drop):
		n.Lost++
	default:
		var dl time.Duration
		var hasDL bool
		if c, ok := ctx.(*simCtx); ok && c.hasDL {
			dl, hasDL = c.deadline, true
		}
		copies := 1
		if dupOK && n.chance(n.cfg.Dup) {
			n.Dups++
			copies = 2
		}
		for i := range copies {
			at := s.Now() + d
			if i > 0 {
				at += n.delay(fromName, to)
			}
			s.At(at, func() { n.deliver(ep, fromName, kind, rc, i == 0, dl, hasDL, h, late) })
		}
	}
	err := rc.sig.Wait(ctx)
	if err != nil && !rc.done {
		rc.abandoned = true
		if rc.cancel != nil {
			rc.cancel() // the server sees its caller leave
		}
		return nil, fmt.Errorf("sim: %s to %s: %w", kind, to, err)
	}
	return rc.val, rc.err
}

// deliver starts the handler on the target (if that incarnation still
// lives) and sends its answer back; only the first copy answers.
func (n *Network) deliver(ep *endpoint, from, kind string, rc *rpcCall, first bool, dl time.Duration, hasDL bool, h handler, late func(any)) {
	s := n.s
	if n.eps[ep.name] != ep {
		return // the node died meanwhile: the request is lost
	}
	ep.rt.p.Go(kind+" from "+from, func() {
		var ctx context.Context = context.Background()
		cancel := context.CancelFunc(func() {})
		if hasDL {
			ctx, cancel = s.newCtx(context.Background(), ep.rt, dl, true)
		}
		if first {
			rc.cancel = cancel
		}
		val, err := h(ctx, ep.srv)
		cancel()
		if !first {
			return
		}
		if n.cut[[2]string{ep.name, from}] || n.chance(n.cfg.Drop) {
			n.Lost++
			return
		}
		s.At(s.Now()+n.delay(ep.name, from), func() {
			if rc.abandoned {
				if late != nil && err == nil {
					n.Late++
					late(val)
				}
				return
			}
			n.answer(rc, val, err)
		})
	})
}

func (n *Network) answer(rc *rpcCall, val any, err error) {
	if rc.done || rc.abandoned {
		return
	}
	rc.val, rc.err, rc.done = val, err, true
	rc.sig.Fire()
}

// Peers is one node incarnation's owner.Peers on the network.
type Peers struct {
	n    *Network
	self string
	rt   *Runtime
	// Late receives a Forward's verdict that arrived after its caller
	// left (on a task of this node): it gives the uses back.
	Late func(node string, res owner.Result)
	// Rejoins counts Rejoined calls.
	Rejoins int
}

var _ owner.Peers = (*Peers)(nil)

// NewPeers returns the node self's view of the network, for rt's proc.
func (n *Network) NewPeers(self string, rt *Runtime) *Peers {
	return &Peers{n: n, self: self, rt: rt}
}

// Forward asks node to decide call (one call per request).
func (p *Peers) Forward(ctx context.Context, node string, call owner.Call) (owner.Result, error) {
	call.Entries = slices.Clone(call.Entries)
	late := func(v any) {
		res := v.(owner.Result)
		if p.Late == nil || !res.Verdict.Allowed || len(res.Receipts) == 0 {
			return
		}
		p.rt.p.Go("late verdict from "+node, func() {
			res.At = p.rt.Now()
			p.Late(node, res)
		})
	}
	v, err := p.n.call(ctx, p.rt, p.self, node, "forward", true, func(ctx context.Context, srv Server) (any, error) {
		rs := srv.Serve(ctx, p.self, []owner.Call{call})
		if len(rs) != 1 {
			return owner.Result{}, fmt.Errorf("sim: Serve answered %d results for 1 call", len(rs))
		}
		r := rs[0]
		r.Receipts = slices.Clone(r.Receipts)
		return r, nil
	}, late)
	if err != nil {
		return owner.Result{}, err
	}
	res := v.(owner.Result)
	res.At = p.rt.Now()
	if call.NoReceipts {
		res.Receipts = nil // as rpc/peer answers a caller that gives nothing back
	}
	return res, nil
}

// ForwardMany asks node to decide calls, all in one request.
func (p *Peers) ForwardMany(ctx context.Context, node string, calls []owner.Call) []owner.Result {
	cs := make([]owner.Call, len(calls))
	for i, c := range calls {
		c.Entries = slices.Clone(c.Entries)
		cs[i] = c
	}
	late := func(v any) {
		for _, res := range v.([]owner.Result) {
			if p.Late == nil || res.Err != nil || !res.Verdict.Allowed || len(res.Receipts) == 0 {
				continue
			}
			p.rt.p.Go("late verdict from "+node, func() {
				res.At = p.rt.Now()
				p.Late(node, res)
			})
		}
	}
	v, err := p.n.call(ctx, p.rt, p.self, node, "forward", true, func(ctx context.Context, srv Server) (any, error) {
		rs := srv.Serve(ctx, p.self, cs)
		if len(rs) != len(cs) {
			return []owner.Result(nil), fmt.Errorf("sim: Serve answered %d results for %d calls", len(rs), len(cs))
		}
		for i := range rs {
			rs[i].Receipts = slices.Clone(rs[i].Receipts)
		}
		return rs, nil
	}, late)
	out := make([]owner.Result, len(calls))
	if err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	at := p.rt.Now()
	for i, r := range v.([]owner.Result) {
		r.At = at
		if calls[i].NoReceipts {
			r.Receipts = nil
		}
		out[i] = r
	}
	return out
}

// Fetch asks node for counters' state.
func (p *Peers) Fetch(ctx context.Context, node string, req owner.FetchRequest) (owner.FetchAnswer, error) {
	req.Counters = slices.Clone(req.Counters)
	v, err := p.n.call(ctx, p.rt, p.self, node, "fetch", false, func(ctx context.Context, srv Server) (any, error) {
		a := srv.ServeFetch(ctx, req)
		a.States = cloneStates(a.States)
		a.Held = slices.Clone(a.Held)
		return a, nil
	}, nil)
	if err != nil {
		return owner.FetchAnswer{}, err
	}
	return v.(owner.FetchAnswer), nil
}

// HandOff moves states to node.
func (p *Peers) HandOff(ctx context.Context, node string, b owner.StateBatch) (owner.StateAck, error) {
	b.States = cloneStates(b.States)
	v, err := p.n.call(ctx, p.rt, p.self, node, "handoff", true, func(ctx context.Context, srv Server) (any, error) {
		c := b
		c.States = cloneStates(b.States) // a duplicate gets its own copy
		return srv.ServeHandOff(ctx, c)
	}, nil)
	if err != nil {
		return owner.StateAck{}, err
	}
	return v.(owner.StateAck), nil
}

// Replicate ships states to node.
func (p *Peers) Replicate(ctx context.Context, node string, b owner.StateBatch) (owner.StateAck, error) {
	b.States = cloneStates(b.States)
	v, err := p.n.call(ctx, p.rt, p.self, node, "replicate", false, func(ctx context.Context, srv Server) (any, error) {
		return srv.ServeReplicate(ctx, b)
	}, nil)
	if err != nil {
		return owner.StateAck{}, err
	}
	return v.(owner.StateAck), nil
}

// Release gives back uses node recorded.
func (p *Peers) Release(ctx context.Context, node string, rs []owner.Receipt, elapsed time.Duration) error {
	rs = slices.Clone(rs)
	// Only a release by id may arrive twice: a sliding log (or a slot)
	// removes the use by its id once, while a window or a bucket counts
	// down again. Production delivers a Release at most once (gRPC, and
	// peer.Client.Release does not retry), so a window's or bucket's
	// release is never duplicated here either.
	byID := !slices.ContainsFunc(rs, func(r owner.Receipt) bool {
		return r.Limit.Algorithm != limiter.SlidingLog && r.Limit.Algorithm != limiter.Concurrency
	})
	_, err := p.n.call(ctx, p.rt, p.self, node, "release", byID, func(ctx context.Context, srv Server) (any, error) {
		return nil, srv.ServeRelease(ctx, slices.Clone(rs), elapsed)
	}, nil)
	return err
}

// Invalidate tells node that uses of keys were given back.
func (p *Peers) Invalidate(ctx context.Context, node string, keys []string) error {
	keys = slices.Clone(keys)
	_, err := p.n.call(ctx, p.rt, p.self, node, "invalidate", true, func(ctx context.Context, srv Server) (any, error) {
		srv.ServeInvalidate(ctx, slices.Clone(keys))
		return nil, nil
	}, nil)
	return err
}

// Rejoined is told that node (re)joined: the simulated transport keeps
// no backoffs, so it only counts.
func (p *Peers) Rejoined(node string) { p.Rejoins++ }

// cloneStates deep-copies states, as a wire would: the receiver shifts
// their times in place.
func cloneStates(cs []limiter.CounterState) []limiter.CounterState {
	out := slices.Clone(cs)
	for i := range out {
		out[i].Log = slices.Clone(out[i].Log)
	}
	return out
}
