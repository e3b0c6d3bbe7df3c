package owner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/internal/logkey"
	"github.com/ringlimit/ringlimit/internal/refusal"
	"github.com/ringlimit/ringlimit/internal/sabotage"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
)

// Membership is what the router needs of the cluster: the current ring and
// each member's gRPC address. cluster.Cluster provides it.
type Membership interface {
	Ring() *ring.Ring
	// Addr returns a live member's gRPC address.
	Addr(name string) (string, bool)
}

// LeftReporter is optionally implemented by a Membership that knows which
// members left gracefully. Such a member handed its keys off before it
// left the gossip, so once its port refuses connections a first-use fetch
// from it has nothing left to learn: the fetch counts as answered, and the
// call goes on with the state the hand-off brought, instead of waiting out
// FetchTimeout and meeting the fallback policy.
type LeftReporter interface {
	Left(name string) bool
}

// RouteRing is optionally implemented by a Membership whose routing ring is
// not simply the ring of live members (a node without a majority routes
// by all the members it knows): Route returns the ring to route by for a
// ring of live members.
type RouteRing interface {
	Route(live *ring.Ring) *ring.Ring
}

// ring is the ring calls are routed by. It changes only in RingChanged,
// after the transition for it is set up, so a call never routes by a ring
// whose first-use fetches this node is not yet prepared to make.
func (r *Router) ring() *ring.Ring {
	if rg := r.routing.Load(); rg != nil {
		return rg
	}
	// Not routed yet: a peer may call while this node is still setting up
	// its first ring; wait for it rather than count by a ring whose
	// transition is not prepared.
	ctx, cancel := r.rt.WithTimeout(context.Background(), time.Second)
	_ = r.routed.Wait(ctx)
	cancel()
	if rg := r.routing.Load(); rg != nil {
		return rg
	}
	return r.cfg.Members.Ring()
}

// RoutingRing is the ring calls are routed by now (nil before the first
// RingChanged): the live ring, or with a RouteRing membership the ring it
// chose for it.
func (r *Router) RoutingRing() *ring.Ring { return r.routing.Load() }

// Self is this node's name on the ring.
func (r *Router) Self() string { return r.self }

// Config configures a Router. Fields marked required have no default.
type Config struct {
	// Self is this node's name on the ring. Required.
	Self string
	// SelfAddr is this node's gRPC address, given to peers it asks for
	// state (they may not know it yet). Default: none.
	SelfAddr string
	// Members gives the ring and addresses. Required.
	Members Membership
	// Engine counts the keys this node owns. Required.
	Engine *limiter.Memory
	// Replicas holds state replicated to this node by owners. Default: a
	// new Memory on the engine's clock settings (closed by Close).
	Replicas *limiter.Memory
	// Peers reaches the other nodes (package rpc/peer over gRPC). Required.
	Peers Peers
	// Runtime reads time, runs tasks and waits. Default RealRuntime{}
	// (package sim supplies a deterministic one).
	Runtime Runtime
	// Replication is how many ring successors receive each owned key's
	// changes (0 turns replication off). The facade's default is 1.
	Replication int
	// ReplicationDelay is how long the replicator lets changes gather
	// before it ships them (more per RPC, fewer RPCs); it adds to the
	// replication lag. Default 10 ms: each replication RPC costs a node
	// about as much CPU as a client call, and at 2 ms a lightly loaded
	// node sent nearly one per decision (bench: 10 ms took ~25% of the
	// fleet's CPU per decision off at concurrency 1). Negative ships at
	// once.
	ReplicationDelay time.Duration
	// ForwardTimeout caps a forward whose caller set no deadline. Default 1 s.
	ForwardTimeout time.Duration
	// FetchTimeout bounds the first-use fetch of a moved key's state from
	// its previous owner and replica holders (the caller's deadline bounds
	// it too). Default 200 ms.
	FetchTimeout time.Duration
	// FetchWindow is how long after a ring change first uses still fetch
	// (hand-offs normally land well within it). Default 10 s.
	FetchWindow time.Duration
	// RebalanceInterval is how often the node hands off keys it holds but
	// does not own (stray counts made by peers on an older ring, retries of
	// failed hand-offs). Default 1 s.
	RebalanceInterval time.Duration
	// RefusalCacheSize bounds the refusal cache (entries). Default 65,536;
	// negative turns the cache off.
	RefusalCacheSize int
	// Invalidated, when set, is called with keys whose uses were given
	// back, counted here or at their owner (a peer's Invalidate): refusals
	// of them that others cached may be stale. The node passes them to its
	// clients' streams. It must not block. Default nil.
	Invalidated func(keys []string)
	// Bounds checks input before it is routed; zero fields mean defaults.
	Bounds limiter.Bounds
	// Logger receives operational logs. Default slog.Default().
	Logger *slog.Logger
	// LogKeys writes the keys log lines name. Default nil: hashed with a
	// random secret of the process (see internal/logkey).
	LogKeys *logkey.Keys
}

// Router is a node's brain: it routes each entry of a call to the local
// engine or to the key's owner, batches forwards per peer, hands off and
// replicates state, and caches refusals. It is a limiter.Store.
type Router struct {
	cfg      Config
	self     string
	engine   *limiter.Memory
	replicas *limiter.Memory
	ownRepl  bool
	log      *slog.Logger
	bounds   limiter.Bounds

	peers Peers
	rt    Runtime

	// outbox holds handed-off state until its new owner has it, so a
	// first-use fetch in between still finds it.
	outbox *limiter.Memory

	refusals *refusal.Cache
	repl     *replicator
	moves    *moves
	// custody: who counts a key now, while rings disagree (custody.go).
	custody *custody
	// epoch orders local decisions against hand-offs: decisions hold it
	// for reading, a hand-off takes it once for writing before exporting,
	// so every decision made under an older ring has finished by then.
	epoch       sync.RWMutex
	lastSlowLog atomic.Int64 // unix second << 8 | slow-step logs in it

	// calls counts calls under way; once shut is set, the last to
	// finish fires drained (see enter and Drain).
	calls   atomic.Int64
	shut    atomic.Bool
	drained Signal

	stats      Stats
	boundLogs  boundLogs
	routing    atomic.Pointer[ring.Ring]
	routed     Signal // fired once routing is set
	trace      atomic.Pointer[func(key, how string, ringVersion uint64)]
	lastServed atomic.Int64 // unix ns of the last Forward RPC served
	lastChange atomic.Int64 // unix ns of the last ring change
	strays     atomic.Bool  // a count may sit on a node that does not own it

	leases atomic.Pointer[leases] // nil: no leases (EnableLeases, lease_router.go)

	stopCtx context.Context // done at Close: background tasks end
	stop    context.CancelFunc
	bg      *group
	closeMu sync.Once
}

var _ limiter.Store = (*Router)(nil)

// Stats counts what the router did; every field only grows.
type Stats struct {
	Local       atomic.Int64 // calls decided by the local engine
	Served      atomic.Int64 // forwarded calls this node decided for a peer
	Hopped      atomic.Int64 // forwarded calls passed on to a newer owner
	CacheHits   atomic.Int64 // refusals answered from the refusal cache
	HandedOff   atomic.Int64 // counters sent to a new owner
	Received    atomic.Int64 // counters received by hand-off
	Replicated  atomic.Int64 // counter states sent to successors
	Adopted     atomic.Int64 // replicated counters adopted after an owner left
	Fetched     atomic.Int64 // counters fetched on first use after a ring change
	FetchErrors atomic.Int64 // first-use fetches that no source answered
	// FetchSourceErrors counts first-use fetch RPCs to one source that
	// failed, whether or not another source answered.
	FetchSourceErrors atomic.Int64
	FetchHeld         atomic.Int64 // first-use fetches answered "counted elsewhere": calls passed on
	Released          atomic.Int64 // late or rolled-back uses given back

	// ReplicateErrors counts replication RPCs that failed: that successor
	// lacks those changes until the counters change again.
	ReplicateErrors atomic.Int64
	// HandOffRefused and ReplicasRefused count states refused at the key
	// bound (see bounds.go).
	HandOffRefused  atomic.Int64
	ReplicasRefused atomic.Int64
}

// New returns a router. Start its background work with Run.
func New(cfg Config) (*Router, error) {
	switch {
	case cfg.Self == "":
		return nil, fmt.Errorf("%w: owner.Config.Self is required", limiter.ErrInvalid)
	case cfg.Members == nil:
		return nil, fmt.Errorf("%w: owner.Config.Members is required", limiter.ErrInvalid)
	case cfg.Engine == nil:
		return nil, fmt.Errorf("%w: owner.Config.Engine is required", limiter.ErrInvalid)
	case cfg.Peers == nil:
		return nil, fmt.Errorf("%w: owner.Config.Peers is required", limiter.ErrInvalid)
	case cfg.Replication < 0:
		return nil, &limiter.InputError{Field: "replication", Reason: "must not be negative"}
	}
	switch {
	case cfg.ReplicationDelay == 0:
		cfg.ReplicationDelay = 10 * time.Millisecond
	case cfg.ReplicationDelay < 0:
		cfg.ReplicationDelay = 0
	}
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = time.Second
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = 200 * time.Millisecond
	}
	if cfg.FetchWindow <= 0 {
		cfg.FetchWindow = 10 * time.Second
	}
	if cfg.RebalanceInterval <= 0 {
		cfg.RebalanceInterval = time.Second
	}
	if cfg.RefusalCacheSize == 0 {
		cfg.RefusalCacheSize = 1 << 16
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Runtime == nil {
		cfg.Runtime = RealRuntime{}
	}
	r := &Router{
		cfg:      cfg,
		self:     cfg.Self,
		engine:   cfg.Engine,
		replicas: cfg.Replicas,
		log:      cfg.Logger,
		bounds:   cfg.Bounds.WithDefaults(),
		peers:    cfg.Peers,
		rt:       cfg.Runtime,
		outbox:   limiter.NewMemory(limiter.MemoryConfig{Shards: 4, Clock: cfg.Runtime, SweepInterval: -1}),
		routed:   cfg.Runtime.NewSignal(),
		drained:  cfg.Runtime.NewSignal(),
		bg:       newGroup(cfg.Runtime),
	}
	r.stopCtx, r.stop = context.WithCancel(context.Background())
	if r.replicas == nil {
		sweep := time.Duration(0) // the default
		if _, real := cfg.Runtime.(RealRuntime); !real {
			sweep = -1 // no goroutine of its own beside the runtime's tasks
		}
		r.replicas = limiter.NewMemory(limiter.MemoryConfig{Keys: cfg.Engine.Budget(), Clock: cfg.Runtime, SweepInterval: sweep}) // replicas count toward the engine's key bound
		r.ownRepl = true
	}
	r.refusals = refusal.New(cfg.RefusalCacheSize)
	r.repl = newReplicator(r, cfg.Replication, cfg.ReplicationDelay)
	r.moves = newMoves(r.rt)
	r.custody = newCustody(r.rt, cfg.FetchWindow)
	return r, nil
}

// Stats returns the router's counters.
func (r *Router) Stats() *Stats { return &r.stats }

// Engine returns the local engine.
func (r *Router) Engine() *limiter.Memory { return r.engine }

// enter admits a call unless the router is shutting down; an admitted
// call ends with exit. A call counts itself in before it reads shut, and
// Drain sets shut before it reads the count, so Drain never misses a call
// that got in.
func (r *Router) enter() error {
	r.calls.Add(1)
	if r.shut.Load() {
		r.exit()
		return ErrShuttingDown
	}
	return nil
}

// exit ends a call admitted by enter.
func (r *Router) exit() {
	if r.calls.Add(-1) == 0 && r.shut.Load() {
		r.drained.Fire()
	}
}

// shuttingDown reports whether the router stopped taking calls.
func (r *Router) shuttingDown() bool { return r.shut.Load() }

// ConsumeMany checks and records a batch at its owners, all or nothing.
func (r *Router) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return r.Call(ctx, entries, false)
}

// PeekMany answers what ConsumeMany would, recording nothing.
func (r *Router) PeekMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return r.Call(ctx, entries, true)
}

// Call routes one batch.
func (r *Router) Call(ctx context.Context, entries []limiter.Entry, peek bool) (limiter.Verdict, error) {
	if err := r.enter(); err != nil {
		return limiter.Verdict{}, err
	}
	defer r.exit()
	if err := r.bounds.Check(entries); err != nil {
		return limiter.Verdict{}, err
	}
	c := Call{Entries: entries, Peek: peek}
	recalled := false
	for attempt := 0; ; attempt++ {
		rg := r.ring()
		f := r.hopFacts(rg, c, true)
		if f.Owner == "" {
			return r.spreadCall(ctx, rg, entries, peek)
		}
		step := hopRule(c, true, f)
		if step.Do == countHere {
			if err := r.prepare(ctx, rg, entries); err != nil {
				return limiter.Verdict{}, err
			}
			var expect *ring.Ring
			if attempt < 3 {
				expect = rg // the ring changed meanwhile: route again
			}
			var v limiter.Verdict
			var err error
			var changed bool
			step, changed = r.underEpoch(c, true, hopFacts{}, expect, func(rg *ring.Ring) {
				v, err = r.local(ctx, rg, entries, peek, limiter.WantsRelease(ctx))
			})
			switch {
			case changed:
				continue
			case step.Do == countHere:
				if err == nil && !peek && !v.Allowed && !recalled && r.awaitLeases(ctx, entries) {
					// Uses of these keys were out on leases: decide again
					// with what their holders gave back (lease_router.go).
					recalled = true
					continue
				}
				return v, err
			case step.Do == passOn && step.Call.Hops == 0:
				continue // the ring gives the keys to another node now: route again
			}
		}
		switch {
		case step.Do == moving:
			return limiter.Verdict{}, fmt.Errorf("%w: the batch's keys are moving between owners", ErrUnavailable)
		case step.Call.Hops > 0:
			// Counted elsewhere for now (custody): the call's first hop.
			return r.hop(ctx, step.To, step.Call)
		}
		v, err := r.remote(ctx, step.To, entries, peek)
		if err != nil && errors.Is(err, ErrShuttingDown) && attempt < 2 {
			// The owner is leaving: its keys are moving to their next
			// owners. Wait for this node's ring to drop it and route
			// again, rather than hand the call to the failure policy.
			if r.awaitRingChange(ctx, rg, 250*time.Millisecond) {
				continue
			}
		}
		return v, err
	}
}

// slow logs, at most 8 times a second, a step of a call that took long
// (100 ms): the usual cause of calls answered by the failure policy.
func (r *Router) slow(began time.Time, what, peer, key string) {
	now := r.rt.Now()
	d := now.Sub(began)
	if d < 100*time.Millisecond {
		return
	}
	// At most 8 a second: a stall slows every call at once.
	sec := now.Unix()
	if last := r.lastSlowLog.Load(); last>>8 != sec {
		r.lastSlowLog.CompareAndSwap(last, sec<<8)
	}
	if n := r.lastSlowLog.Add(1); n&0xff > 8 || n>>8 != sec {
		return
	}
	if peer != "" {
		what += " " + peer
	}
	r.log.Warn("ringlimit: slow step", "step", what, "took", d.Round(time.Millisecond), r.cfg.LogKeys.Attr(key))
}

// awaitRingChange waits until this node routes by a ring other than rg,
// at most max or until ctx is done, and reports whether it does.
func (r *Router) awaitRingChange(ctx context.Context, rg *ring.Ring, max time.Duration) bool {
	now := r.rt.Now()
	deadline := now.Add(max)
	if d, ok := ctx.Deadline(); ok && d.Sub(now) < 2*max {
		deadline = now.Add(d.Sub(now) / 2) // leave time for the retry itself
	}
	for r.rt.Now().Before(deadline) && ctx.Err() == nil {
		if r.ring() != rg {
			return true
		}
		if r.rt.Sleep(ctx, 5*time.Millisecond) != nil {
			break
		}
	}
	return r.ring() != rg
}

// Local reports whether this node would decide the batch itself, without
// a round trip (it owns every key and gave none away).
func (r *Router) Local(entries []limiter.Entry) bool {
	if len(entries) == 0 {
		return true
	}
	owner, single := r.ownerOf(r.ring(), entries)
	if !single || owner != r.self {
		return false
	}
	_, moved := r.movedAny(entries)
	return !moved
}

// ownerOf returns the owner of the batch when every entry has the same one.
func (r *Router) ownerOf(rg *ring.Ring, entries []limiter.Entry) (string, bool) {
	if sabotage.On(sabotage.Forward) {
		return r.self, true // test-only (internal/sabotage): count everything here
	}
	first, err := rg.Owner(entries[0].Key)
	if err != nil {
		return r.self, true // no ring yet: count here
	}
	for i := 1; i < len(entries); i++ {
		if o, _ := rg.Owner(entries[i].Key); o != first {
			return "", false
		}
	}
	return first, true
}

// local decides a batch on this node's engine.
func (r *Router) local(ctx context.Context, rg *ring.Ring, entries []limiter.Entry, peek, release bool) (limiter.Verdict, error) {
	if release && !peek && hasSlots(entries) {
		return r.localSlots(ctx, rg, entries) // slots.go
	}
	r.stats.Local.Add(1)
	if release {
		ctx = limiter.WithRelease(ctx)
	}
	var v limiter.Verdict
	var err error
	if peek {
		v, err = r.engine.PeekMany(ctx, entries)
	} else {
		v, err = r.engine.ConsumeMany(ctx, entries)
	}
	if err != nil || peek || !v.Allowed {
		return v, err
	}
	r.traceAdmit(entries, "local")
	r.repl.mark(rg, entries, false)
	if v.Release != nil {
		inner := v.Release
		v.Release = func(ctx context.Context) error {
			err := inner(ctx)
			r.released(ctx, entries)
			return err
		}
	}
	return v, nil
}

// released follows a release of uses counted here: successors get the
// new state, and every node drops refusals it cached for the keys, so the
// freed uses can be taken through any node at once.
func (r *Router) released(ctx context.Context, entries []limiter.Entry) {
	rg := r.ring()
	r.repl.mark(rg, entries, true)
	keys := make([]string, len(entries))
	for i, e := range entries {
		keys[i] = e.Key
	}
	r.dropRefusals(keys)
	ctx, cancel := r.rt.WithTimeout(context.WithoutCancel(ctx), r.cfg.FetchTimeout*4)
	defer cancel()
	g := newGroup(r.rt)
	for _, m := range rg.Members() {
		if m == r.self {
			continue
		}
		g.Go(func() { _ = r.peers.Invalidate(ctx, m, keys) })
	}
	g.Wait()
}

// dropRefusals forgets cached refusals of keys whose uses were given back,
// here and in the caches of this node's clients.
func (r *Router) dropRefusals(keys []string) {
	r.refusals.Drop(keys)
	if r.cfg.Invalidated != nil {
		r.cfg.Invalidated(keys)
	}
}

// releaseHere gives back receipts this node's engine recorded.
func (r *Router) releaseHere(ctx context.Context, rs []limiter.Receipt) error {
	err := r.engine.ReleaseReceipts(ctx, rs)
	entries := make([]limiter.Entry, len(rs))
	for i, rc := range rs {
		entries[i] = limiter.Entry{Key: rc.Key, Limit: rc.Limit}
	}
	r.released(ctx, entries)
	return err
}

// localReceipts decides a forwarded batch here and returns its receipts.
// Callers hold the epoch lock for reading and fetched moved state first.
func (r *Router) localReceipts(ctx context.Context, entries []limiter.Entry, peek bool) (limiter.Verdict, []limiter.Receipt, error) {
	rg := r.ring()
	v, rs, err := r.engine.ConsumeReceipts(ctx, entries, !peek)
	if err == nil && !peek && v.Allowed {
		r.traceAdmit(entries, "forwarded")
		r.repl.mark(rg, entries, false)
	}
	return v, rs, err
}

// ReplicationIdle reports whether every change this node recorded has been
// shipped to its successors (for tests and graceful operations).
func (r *Router) ReplicationIdle() bool { return r.repl.idle() }

// ReplicationLag is how long the oldest counter change not yet shipped to
// the successors has waited (0 when all are shipped): about
// ReplicationDelay plus a round trip when healthy.
func (r *Router) ReplicationLag() time.Duration { return r.repl.lag() }

// SetTrace installs a function told of every use this node's engine
// admits (a debugging aid for tests; nil turns it off).
func (r *Router) SetTrace(f func(key, how string, ringVersion uint64)) { r.trace.Store(&f) }

// tracing reports whether a trace function is installed (so that a trace
// event that costs work to describe is described only then).
func (r *Router) tracing() bool {
	f := r.trace.Load()
	return f != nil && *f != nil
}

func (r *Router) traceEvent(key, what string) {
	if f := r.trace.Load(); f != nil && *f != nil {
		(*f)(key, what, r.ring().Version())
	}
}

func (r *Router) traceAdmit(entries []limiter.Entry, how string) {
	if f := r.trace.Load(); f != nil && *f != nil {
		rg := r.ring()
		for _, e := range entries {
			(*f)(e.Key, how+" "+fmt.Sprint(rg.Members()), rg.Version())
		}
	}
}

// movedTo returns where the batch's keys went when this node gave them to
// a new owner on a first-use fetch (all entries must agree).
func (r *Router) movedTo(entries []limiter.Entry) (string, bool) {
	to, ok := r.custody.GivenTo(entries[0].Key)
	if !ok {
		return "", false
	}
	for i := 1; i < len(entries); i++ {
		if t, ok := r.custody.GivenTo(entries[i].Key); !ok || t != to {
			return "", false
		}
	}
	return to, true
}

// movedAny reports whether any of the batch's keys were given to (or are
// held by) another node; to names it when all agree, else it is empty.
func (r *Router) movedAny(entries []limiter.Entry) (to string, moved bool) {
	if to, ok := r.movedTo(entries); ok {
		return to, true
	}
	for i := range entries {
		if _, ok := r.custody.GivenTo(entries[i].Key); ok {
			return "", true
		}
	}
	return "", false
}

// hop sends a batch to the node that counts its keys for now (custody:
// it was given them, or keeps them while rings disagree), as its first
// hop; that node may pass it on again (hopRule).
func (r *Router) hop(ctx context.Context, to string, call Call) (limiter.Verdict, error) {
	res, err := r.peers.Forward(ctx, to, call)
	if err != nil {
		return limiter.Verdict{}, err
	}
	if res.Err != nil {
		return limiter.Verdict{}, res.Err
	}
	v := res.Verdict
	if v.Allowed && !call.Peek && limiter.WantsRelease(ctx) && len(res.Receipts) > 0 {
		v.Release = r.releaser(to, res.Receipts, res.At)
	}
	return v, nil
}

// remote forwards a batch to its owner.
func (r *Router) remote(ctx context.Context, owner string, entries []limiter.Entry, peek bool) (limiter.Verdict, error) {
	now := r.engine.Now()
	// All or nothing: one entry the owner refused refuses the batch.
	if v, ok := r.refusals.GetAny(entries, now); ok {
		r.stats.CacheHits.Add(1)
		return v, nil
	}
	began := r.rt.Now()
	release := limiter.WantsRelease(ctx)
	res, err := r.peers.Forward(ctx, owner, Call{Entries: entries, Peek: peek, NoReceipts: peek || !release})
	r.slow(began, "forward to", owner, entries[0].Key)
	if err != nil {
		return limiter.Verdict{}, err
	}
	return r.remoteAnswer(owner, entries, peek, release, now, res)
}

// remoteAnswer reads an owner's answer to a forwarded batch sent at now
// (on the engine's clock): a refusal of one key is cached, an allowed
// consume gets a Release when the caller wants one.
func (r *Router) remoteAnswer(owner string, entries []limiter.Entry, peek, release bool, now int64, res Result) (limiter.Verdict, error) {
	if res.Err != nil {
		return limiter.Verdict{}, res.Err
	}
	v := res.Verdict
	if !v.Allowed && len(entries) == 1 {
		// From the moment the call left: the owner decided later, so the
		// cached wait ends no later than its own.
		r.refusals.Put(&entries[0], v, now)
	}
	if v.Allowed && !peek && release && len(res.Receipts) > 0 {
		v.Release = r.releaser(owner, res.Receipts, res.At)
	}
	return v, nil
}

// releaser gives back receipts held by owner, once.
func (r *Router) releaser(owner string, rs []Receipt, at time.Time) func(context.Context) error {
	var done atomic.Bool
	return func(ctx context.Context) error {
		if done.Swap(true) {
			return nil
		}
		return r.ReleaseAt(ctx, owner, rs, r.rt.Now().Sub(at))
	}
}

// ReleaseAt gives back receipts (ages at their verdict, elapsed since),
// each at the node that recorded it: its receipt names that node. sentTo,
// the node the call went to, is only the fallback for receipts that name
// none, because a call can be passed on (a hop, a moved key) and recorded
// further along; giving its uses back to sentTo would free nothing there
// and leave them counted where they are. The Peers implementation gives
// late verdicts' receipts here.
func (r *Router) ReleaseAt(ctx context.Context, sentTo string, rs []Receipt, elapsed time.Duration) error {
	r.stats.Released.Add(int64(len(rs)))
	sent := map[string]error{}
	for _, g := range groupReceipts(rs, sentTo) {
		sent[g.node] = r.releaseOn(ctx, g.node, g.receipts, elapsed)
	}
	return r.followSlots(ctx, rs, sentTo, elapsed, sent) // slots.go
}

// receiptGroup is the receipts one node recorded.
type receiptGroup struct {
	node     string
	receipts []Receipt
}

// groupReceipts groups receipts by the node that recorded them (fallback
// for those that name none), in order of first appearance.
func groupReceipts(rs []Receipt, fallback string) []receiptGroup {
	var groups []receiptGroup
	for _, rc := range rs {
		node := rc.Node
		if node == "" {
			node = fallback
		}
		i := slices.IndexFunc(groups, func(g receiptGroup) bool { return g.node == node })
		if i < 0 {
			groups = append(groups, receiptGroup{node: node})
			i = len(groups) - 1
		}
		groups[i].receipts = append(groups[i].receipts, rc)
	}
	return groups
}

// releaseOn gives back receipts node recorded: here, or by a Release RPC.
func (r *Router) releaseOn(ctx context.Context, node string, rs []Receipt, elapsed time.Duration) error {
	if node == r.self {
		return r.releaseHere(ctx, ReceiptsToEngine(rs, r.self, r.engine.Now(), limiter.Micros(elapsed)))
	}
	return r.peers.Release(ctx, node, rs, elapsed)
}

// spread runs a batch whose entries have several owners: each owner
// records its part; when any refuses, the others' records are given back
// (all or nothing). c is the batch as it reached this node: made here
// (origin), or forwarded by a peer whose ring gave the keys one owner —
// then each part goes on one hop further (the hop rule), and the part
// this node owns is decided as a forwarded call.
func (r *Router) spread(ctx context.Context, rg *ring.Ring, c Call, origin bool) (limiter.Verdict, []*part, error) {
	peek := c.Peek
	var parts []*part
	byOwner := map[string]*part{}
	for _, e := range c.Entries {
		o, _ := rg.Owner(e.Key)
		p := byOwner[o]
		if p == nil {
			p = &part{owner: o}
			byOwner[o] = p
			parts = append(parts, p)
		}
		p.entries = append(p.entries, e)
	}
	// partCall is a part as it goes to its owner, or as this node decides it.
	partCall := func(p *part, here bool) Call {
		if origin {
			return Call{Entries: p.entries, Peek: peek}
		}
		if here {
			return Call{Entries: p.entries, Peek: peek, Hops: c.Hops, Final: c.Final}
		}
		return Call{Entries: p.entries, Peek: peek, Hops: hops(c) + 1, Final: c.Final, Direct: true}
	}
	// send forwards a part to its owner and keeps the owner's answer.
	send := func(p *part, call Call) {
		res, err := r.peers.Forward(ctx, p.owner, call)
		switch {
		case err != nil:
			p.err = err
		case res.Err != nil:
			p.err = res.Err
		default:
			p.verdict, p.receipts, p.at = res.Verdict, res.Receipts, res.At
		}
	}
	g := newGroup(r.rt)
	for _, p := range parts {
		g.Go(func() {
			if p.owner == r.self {
				if p.err = r.prepare(ctx, rg, p.entries); p.err != nil {
					return
				}
				var rs []limiter.Receipt
				step, _ := r.underEpoch(partCall(p, true), origin, hopFacts{}, nil, func(*ring.Ring) {
					p.verdict, rs, p.err = r.localReceipts(ctx, p.entries, peek)
				})
				if step.Do == countHere && p.err == nil && !peek && !p.verdict.Allowed && r.awaitLeases(ctx, p.entries) {
					// Uses of this part's keys were out on leases: decide it
					// again with what their holders gave back, as a batch
					// of one owner is (lease_router.go).
					step, _ = r.underEpoch(partCall(p, true), origin, hopFacts{}, nil, func(*ring.Ring) {
						p.verdict, rs, p.err = r.localReceipts(ctx, p.entries, peek)
					})
				}
				switch step.Do {
				case countHere:
					p.receipts, p.at = ReceiptsFromEngine(rs, r.self, r.engine.Now()), r.rt.Now()
				case passOn: // counted elsewhere for now: the part goes there
					p.owner = step.To
					send(p, step.Call)
				default:
					p.err = fmt.Errorf("%w: the batch's keys are moving between owners", ErrUnavailable)
				}
				return
			}
			send(p, partCall(p, false))
		})
	}
	g.Wait()
	v := limiter.Verdict{Allowed: true, Remaining: int64(^uint64(0) >> 1)}
	var firstErr error
	for _, p := range parts {
		if p.err != nil {
			if firstErr == nil {
				firstErr = p.err
			}
			v.Allowed = false
			continue
		}
		pv := p.verdict
		v.Remaining = min(v.Remaining, pv.Remaining)
		if !pv.Allowed {
			v.Allowed = false
			if pv.RetryAfter > v.RetryAfter {
				v.RetryAfter = pv.RetryAfter
			}
			if pv.RetryAt.After(v.RetryAt) {
				v.RetryAt = pv.RetryAt
			}
		} else if pv.ResetAt.After(v.ResetAt) {
			v.ResetAt = pv.ResetAt
		}
	}
	if !v.Allowed && !peek {
		// All or nothing: give back what the owners that passed recorded.
		for _, p := range parts {
			if p.err == nil && p.verdict.Allowed && len(p.receipts) > 0 {
				if err := r.ReleaseAt(context.WithoutCancel(ctx), p.owner, p.receipts, r.rt.Now().Sub(p.at)); err != nil {
					r.log.Warn("ringlimit: could not give back part of a refused batch; a count is left behind", "owner", p.owner, "err", err)
				}
			}
		}
	}
	if firstErr != nil {
		return limiter.Verdict{}, nil, firstErr
	}
	if v.Allowed {
		v.RetryAfter = 0
	} else {
		v.ResetAt = time.Time{}
	}
	return v, parts, nil
}

// part is one owner's share of a spread batch.
type part struct {
	owner    string
	entries  []limiter.Entry
	verdict  limiter.Verdict
	receipts []Receipt
	at       time.Time
	err      error
}

// spreadCall is spread for a batch made here: an allowed one's Release
// gives every part back where it was recorded.
func (r *Router) spreadCall(ctx context.Context, rg *ring.Ring, entries []limiter.Entry, peek bool) (limiter.Verdict, error) {
	v, parts, err := r.spread(ctx, rg, Call{Entries: entries, Peek: peek}, true)
	if err != nil || !v.Allowed || peek || !limiter.WantsRelease(ctx) {
		return v, err
	}
	var once atomic.Bool
	v.Release = func(ctx context.Context) error {
		if once.Swap(true) {
			return nil
		}
		var errs []error
		for _, p := range parts {
			errs = append(errs, r.ReleaseAt(ctx, p.owner, p.receipts, r.rt.Now().Sub(p.at)))
		}
		return errors.Join(errs...)
	}
	return v, nil
}

// spreadForwarded is spread for a forwarded batch whose keys this node's
// ring gives to several owners: its receipts are every part's, each
// naming the node that recorded it, with ages as of now.
func (r *Router) spreadForwarded(ctx context.Context, c Call) Result {
	v, parts, err := r.spread(ctx, r.ring(), c, false)
	if err != nil {
		return Result{Err: err}
	}
	res := Result{Verdict: v}
	if v.Allowed && !c.Peek {
		now := r.rt.Now()
		for _, p := range parts {
			aged := limiter.Micros(now.Sub(p.at))
			for _, rc := range p.receipts {
				// Ages as of now; the recording node's own reading moves
				// with them, so its exact path (AtUs - AgeUs) is unchanged.
				rc.AgeUs += aged
				rc.StartAgeUs += aged
				rc.AfterAheadUs -= aged
				if rc.AtUs != 0 {
					rc.AtUs += aged
				}
				res.Receipts = append(res.Receipts, rc)
			}
		}
	}
	return res
}
