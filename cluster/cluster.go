package cluster

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ringlimit/ringlimit/ring"
)

// ErrClosed is returned by Leave on a Cluster that is already closed.
var ErrClosed = errors.New("cluster: closed")

// ErrBind is wrapped by Start's error when the gossip address cannot be
// bound (TCP or UDP): the port is in use, or the address is not this host's.
var ErrBind = errors.New("cluster: cannot bind the gossip address")

// bindTransport opens the gossip listeners (TCP and UDP on one port). With
// port 0 the kernel picks the TCP port, which may be taken for UDP; that is
// retried, as memberlist.Create does.
func bindTransport(mc *memberlist.Config) (*memberlist.NetTransport, error) {
	tries := 1
	if mc.BindPort == 0 {
		tries = 10
	}
	var err error
	for range tries {
		var nt *memberlist.NetTransport
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger,
		})
		if err == nil {
			return nt, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}

// deadRetention is how long a dead or left member stays in Members.
const deadRetention = 5 * time.Minute

// defaultLeaveTimeout bounds Leave when its context has no deadline.
const defaultLeaveTimeout = 5 * time.Second

// Cluster is this node's view of the membership and the ring built from it.
// Its methods are safe for concurrent use.
type Cluster struct {
	cfg  Config
	log  *slog.Logger
	ml   *memberlist.Memberlist
	self string // this node's advertised gossip address, host:port
	meta atomic.Pointer[[]byte]

	// mu guards members. It is taken inside memberlist's callbacks (which
	// hold memberlist's node lock), so never call memberlist while holding it.
	mu      sync.Mutex
	members map[string]*record
	// states counts changes of members' states (under mu, read without
	// it): a view computed from Members is current while it is unchanged.
	states atomic.Uint64
	// probeInterval is memberlist's probe interval (the profile's).
	probeInterval time.Duration

	ring      atomic.Pointer[ring.Ring]
	signal    chan struct{} // capacity 1: "membership changed, rebuild"
	rebuildMu sync.Mutex    // serialises rebuilds, so rings publish in order

	subMu  sync.Mutex // guards subs and closed; held while publishing
	subs   map[*subscriber]struct{}
	closed bool

	lifeMu    sync.Mutex // serialises Leave and Close
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// Start creates the local node, joins the cluster and starts following its
// membership. With an empty Join list it is a one-node cluster. A join that
// reaches none of the Join addresses is retried until it succeeds or ctx is
// done; then Start returns an error wrapping ctx's. A Join list that resolves
// only to this node's own address counts as joined (the first node of a
// Kubernetes headless service). ctx bounds only Start; Close stops the node.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Join = slices.Clone(cfg.Join)
	cfg.SecretKey = slices.Clone(cfg.SecretKey)
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	if cfg.Version == "" {
		cfg.Version = defaultVersion()
	}
	if cfg.RejoinInterval == 0 {
		cfg.RejoinInterval = DefaultRejoinInterval
	}
	c := &Cluster{
		cfg:     cfg,
		log:     cfg.Logger.With("node", cfg.Name),
		members: make(map[string]*record),
		signal:  make(chan struct{}, 1),
		subs:    make(map[*subscriber]struct{}),
		done:    make(chan struct{}),
	}

	meta := encodeMeta(cfg.GRPCAddr, cfg.Version, false)
	c.meta.Store(&meta)

	mc := cfg.memberlistConfig()
	c.probeInterval = mc.ProbeInterval
	d := &delegate{c: c}
	mc.Delegate, mc.Events, mc.Ping = d, d, d
	mc.Logger = log.New(&logWriter{log: c.log, onSuspect: c.markSuspect}, "", 0)
	// The transport is built here rather than by memberlist.Create, so a
	// port that cannot be bound is told apart (ErrBind) from a cluster
	// that cannot be joined: memberlist's own errors lose the cause.
	nt, err := bindTransport(mc)
	if err != nil {
		return nil, fmt.Errorf("%w: gossip %s: %v", ErrBind, cfg.gossipAddr(), err)
	}
	mc.BindPort = nt.GetAutoBindPort()
	if cfg.AdvertiseAddr == "" {
		mc.AdvertisePort = mc.BindPort
	}
	mc.Transport = nt
	if cfg.wrapTransport != nil {
		mc.Transport = cfg.wrapTransport(nt)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = nt.Shutdown() // memberlist does not close a transport it was given
		return nil, fmt.Errorf("cluster: start gossip on %s: %w", cfg.gossipAddr(), err)
	}
	c.ml = ml
	ln := ml.LocalNode()
	c.self = net.JoinHostPort(ln.Addr.String(), strconv.Itoa(int(ln.Port)))

	// Create announced this node through NotifyJoin; build the first ring
	// now so Ring is never nil once Start returns.
	c.rebuild()
	c.wg.Add(1)
	go c.run()

	if len(cfg.Join) > 0 {
		if err := c.joinUntil(ctx); err != nil {
			c.Close()
			return nil, err
		}
		// The join's state exchange told us every member: publish the ring
		// of all of them before Start returns, so the node never routes by
		// a ring that holds only itself (it would count keys it does not
		// own from nothing).
		c.rebuild()
		if cfg.RejoinInterval > 0 {
			c.wg.Add(1)
			go c.rejoinLoop()
		}
	}
	c.log.Info("cluster node started", "gossip", c.self, "members", ml.NumMembers())
	return c, nil
}

// run turns membership signals into ring rebuilds. It is the only goroutine
// that publishes rings, so subscribers see them in order.
func (c *Cluster) run() {
	defer c.wg.Done()
	prune := time.NewTicker(time.Minute)
	defer prune.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-c.signal:
			c.rebuild()
		case now := <-prune.C:
			c.prune(now)
		}
	}
}

// rebuild builds a ring from the members in ring states and publishes it
// if the set changed.
func (c *Cluster) rebuild() {
	c.rebuildMu.Lock()
	defer c.rebuildMu.Unlock()
	c.mu.Lock()
	names := make([]string, 0, len(c.members))
	for _, r := range c.members {
		if inRing(r.State) {
			names = append(names, r.Name)
		}
	}
	c.mu.Unlock()
	slices.Sort(names)
	if cur := c.ring.Load(); cur != nil && slices.Equal(cur.Members(), names) {
		return
	}
	r, err := ring.New(names, c.cfg.Ring)
	if err != nil {
		// Only an empty set (this node left) can get here with a validated
		// config; keep routing with the last ring.
		c.log.Debug("ring not rebuilt", "members", names, "err", err)
		return
	}
	c.log.Debug("ring rebuilt", "version", fmt.Sprintf("%016x", r.Version()), "members", names)
	c.publish(r)
}

func (c *Cluster) prune(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, r := range c.members {
		if !inRing(r.State) && name != c.cfg.Name && now.Sub(r.since) > deadRetention {
			delete(c.members, name)
			c.states.Add(1)
		}
	}
}

// changed asks run to rebuild, without ever blocking memberlist.
func (c *Cluster) changed() {
	select {
	case c.signal <- struct{}{}:
	default: // a rebuild is already pending; it will see this change too
	}
}

func (c *Cluster) setMember(m Member) {
	c.mu.Lock()
	r, ok := c.members[m.Name]
	if !ok || r.State != m.State {
		c.members[m.Name] = &record{Member: m, since: time.Now()}
		c.states.Add(1)
	} else if r.Member != m {
		r.Member = m
		c.states.Add(1)
	}
	c.mu.Unlock()
	c.changed()
}

// markSuspect records that this node's probe of name failed.
func (c *Cluster) markSuspect(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.members[name]; ok && r.State == StateAlive {
		r.State, r.since = StateSuspect, time.Now()
		c.states.Add(1)
	}
}

// markAlive clears a suspicion after a successful probe.
func (c *Cluster) markAlive(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.members[name]; ok && r.State == StateSuspect {
		r.State, r.since = StateAlive, time.Now()
		c.states.Add(1)
	}
}

// Ring returns the current ring snapshot. It is one atomic load; the ring
// is immutable, so callers may keep it as long as they like.
func (c *Cluster) Ring() *ring.Ring { return c.ring.Load() }

// StateVersion changes whenever a member's state, address or version
// changes, or a member is forgotten: a view derived from Members stays
// current while StateVersion returns the same number. It is one atomic
// load, for callers that cache such a view on a hot path.
func (c *Cluster) StateVersion() uint64 { return c.states.Load() }

// ProbeInterval is how often memberlist probes one member (the profile's
// interval, 200 ms local, 1 s LAN): the pace of its failure detector.
func (c *Cluster) ProbeInterval() time.Duration { return c.probeInterval }

// Members returns every member this node knows, sorted by name, including
// dead and left ones for a few minutes after they went.
func (c *Cluster) Members() []Member {
	c.mu.Lock()
	out := make([]Member, 0, len(c.members))
	for _, r := range c.members {
		out = append(out, r.Member)
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// Member returns the member with the given name, if this node knows it.
func (c *Cluster) Member(name string) (Member, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.members[name]
	if !ok {
		return Member{}, false
	}
	return r.Member, true
}

// Local returns this node as a member (its State is "left" after Leave).
func (c *Cluster) Local() Member {
	m, ok := c.Member(c.cfg.Name)
	if !ok {
		md := decodeMeta(*c.meta.Load())
		m = Member{Name: c.cfg.Name, GossipAddr: c.self, GRPCAddr: md.GRPC, Version: md.Ver, State: StateAlive}
	}
	return m
}

// Health returns memberlist's health score: 0 is healthy, higher means this
// node is missing its own probe deadlines (an overloaded host), which also
// makes it slower to declare others dead.
func (c *Cluster) Health() int { return c.ml.GetHealthScore() }

// PrepareLeave announces that this node is about to leave while it keeps
// gossiping: every member, this one included, drops it from the ring (its
// state becomes "left"), so its keys move to their next owners while it
// can still answer their questions about them. Leave finishes the job. It
// waits for the announcement to go out, bounded by ctx (or 5 s).
func (c *Cluster) PrepareLeave(ctx context.Context) error {
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	if c.isClosed() {
		return ErrClosed
	}
	timeout := defaultLeaveTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	leaving := encodeMeta(c.cfg.GRPCAddr, c.cfg.Version, true)
	c.meta.Store(&leaving)
	err := c.ml.UpdateNode(timeout)
	if err == nil {
		// Gossip reaches every member only with high probability; a member
		// that missed the announcement keeps sending calls here. A push/pull
		// with each member delivers it for certain.
		c.pushState()
	}
	c.mu.Lock()
	if r, ok := c.members[c.cfg.Name]; ok && r.State != StateLeft {
		r.State, r.since = StateLeft, time.Now()
		c.states.Add(1)
	}
	c.mu.Unlock()
	c.rebuild()
	if err != nil {
		return fmt.Errorf("cluster: announce leave: %w", err)
	}
	return nil
}

// pushState exchanges full state (a push/pull, what memberlist's Join does)
// with every other live member, in parallel.
func (c *Cluster) pushState() {
	var addrs []string
	for _, n := range c.ml.Members() {
		if n.Name != c.cfg.Name {
			addrs = append(addrs, n.Address())
		}
	}
	var wg sync.WaitGroup
	for _, a := range addrs {
		wg.Go(func() {
			if _, err := c.ml.Join([]string{a}); err != nil {
				c.log.Debug("cluster: push state", "to", a, "err", err)
			}
		})
	}
	wg.Wait()
}

// Leave tells the cluster this node is leaving, waits until the message is
// out (bounded by ctx's deadline, or 5 s without one), then closes the node.
// The others drop it from their rings at once instead of after a failure
// timeout. Subscribers see a last ring without this node when there are other
// members. It returns ErrClosed if the node was already closed.
func (c *Cluster) Leave(ctx context.Context) error {
	c.lifeMu.Lock()
	if c.isClosed() {
		c.lifeMu.Unlock()
		return ErrClosed
	}
	timeout := defaultLeaveTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	// First say "leaving" in the metadata, so that the others record the
	// node as left rather than dead, then send memberlist's leave message.
	leaving := encodeMeta(c.cfg.GRPCAddr, c.cfg.Version, true)
	c.meta.Store(&leaving)
	begin := time.Now()
	err := c.ml.UpdateNode(timeout / 2)
	if err == nil {
		err = c.ml.Leave(max(timeout-time.Since(begin), time.Millisecond))
	}
	c.lifeMu.Unlock()
	if err != nil {
		err = fmt.Errorf("cluster: leave: %w", err)
	}
	// Publish the ring without this node before stopping.
	c.rebuild()
	c.Close()
	return err
}

// Close stops the node without telling the others, as a crash would: they
// declare it dead after the failure timeout. It stops every goroutine of
// the Cluster and closes subscriber channels. It is idempotent.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.lifeMu.Lock()
		close(c.done)
		if err := c.ml.Shutdown(); err != nil {
			c.log.Warn("gossip shutdown", "err", err)
		}
		c.lifeMu.Unlock()
		c.wg.Wait()
		c.subMu.Lock()
		c.closed = true
		for s := range c.subs {
			close(s.ch)
			delete(c.subs, s)
		}
		c.subMu.Unlock()
	})
	return nil
}

func (c *Cluster) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// delegate receives memberlist's callbacks. They run synchronously inside
// memberlist, some under its node lock: they only update the member table
// and signal run, never block and never call memberlist.
type delegate struct{ c *Cluster }

func (d *delegate) NodeMeta(limit int) []byte { return *d.c.meta.Load() }

func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

func (d *delegate) NotifyJoin(n *memberlist.Node)   { d.c.setMember(memberFromNode(n, StateAlive)) }
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.c.setMember(memberFromNode(n, StateAlive)) }

// NotifyLeave: dead, unless the node announced it was leaving.
func (d *delegate) NotifyLeave(n *memberlist.Node) { d.c.setMember(memberFromNode(n, StateDead)) }

func (d *delegate) AckPayload() []byte { return nil }
func (d *delegate) NotifyPingComplete(n *memberlist.Node, _ time.Duration, _ []byte) {
	d.c.markAlive(n.Name)
}
