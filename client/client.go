package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/internal/codec"
	"github.com/ringlimit/ringlimit/internal/refusal"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/member"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// defaultTimeout is Config.Timeout's default, the nodes' own
// (ringlimit.DefaultTimeout).
const defaultTimeout = 250 * time.Millisecond

// Config configures a client of a node fleet. DialConfig never writes
// into the caller's Config.
type Config struct {
	// Addrs are the gRPC host:port addresses of the nodes to call; at
	// least one. Calls are spread over them round-robin; any node answers
	// for any key (it forwards to the key's owner).
	Addrs []string
	// Security holds the client's certificate files (mTLS: CertFile,
	// KeyFile and CAFile) and the bearer token; zero means plaintext and
	// no token. See Credentials.
	Security Security
	// Timeout bounds a call (all its retries included) whose context has
	// no deadline, and a Release likewise. Default 250 ms.
	Timeout time.Duration
	// MaxBatch caps the calls of one batch (a MultiStream message, or a
	// Multi RPC). Default 512.
	MaxBatch int
	// Logger receives failed give-backs of late verdicts. Default
	// slog.Default().
	Logger *slog.Logger
	// DialOptions are extra gRPC dial options, appended after the
	// credentials. Default none.
	DialOptions []grpc.DialOption
	// RoundRobin spreads calls over Addrs in turn, each node forwarding
	// to the key's owner. By default the client instead sends each call
	// straight to the node that owns its first key, so that node decides
	// it locally (one network hop instead of two): it learns the ring from
	// the nodes' Members answer every RingRefresh, uses its copy only when
	// it has the nodes' ring version (else it spreads calls round-robin
	// meanwhile), and dials owners it was not given. A stale copy costs a
	// forward, never a wrong count: the node still routes each key to its
	// owner. Default false.
	RoundRobin bool
	// RingRefresh is how often the client re-reads the membership (unless
	// RoundRobin).
	// Default 1 s.
	RingRefresh time.Duration
	// RefusalCacheSize bounds the client's refusal cache (entries; when
	// full, the refusals whose waits end soonest go first). After a node
	// refused a single-key call with a wait, the client refuses calls for
	// that counter itself until the wait is over, with the same RetryAt,
	// making no RPC; a batch with such an entry is refused too, naming
	// that entry's wait. The cache can only refuse more, never admit more.
	// When uses of a key are given back (a release), the nodes push the
	// key on the client's MultiStreams and the client drops its refusals:
	// a cached refusal outlives the room that came back by about one
	// message from the node; if that message is lost (the stream broke;
	// the client then drops everything) or the node has no MultiStream,
	// by at most the cached wait. Default 65,536; negative turns it off.
	RefusalCacheSize int
	// Leases lets the client ask a key's owner for a lease when it uses
	// the key often (a few calls within a few ms): up to k uses of its
	// counter that the client then decides in its own process, without a
	// round trip, giving back what it did not use (issue #21; sliding logs
	// and fixed windows, single-entry consumes). No window ever admits
	// more than the limit. Needs owner routing (not RoundRobin) and nodes
	// that grant leases. nil means on (the default); point it at false
	// to turn leases off.
	Leases *bool
}

// Client is a limiter.Store over a fleet of ringlimit nodes. It sends
// each call to its key's owner (or, with RoundRobin, spreads calls over
// its nodes in turn), and coalesces the calls that are concurrent on one
// node into one batch, sent as one message of a long-lived MultiStream
// (or one Multi RPC to a node without it), the way nodes batch their
// forwards: when no batch to that node is in flight a call goes at once;
// while one is, calls queue, and the next batch carries the whole queue. A
// call that meets an unavailable node (down, shutting down, or failing
// recently) is retried on the next one, within the call's deadline.
//
// A Client is safe for concurrent use. Close it when done.
type Client struct {
	cfg    Config
	opts   []grpc.DialOption
	nodes  []*clientNode
	next   atomic.Uint32
	stats  rpc.BatcherStats
	closed atomic.Bool
	once   sync.Once

	// routing to owners: the ring as last read, the owners dialled beyond
	// Addrs, and the refresher.
	route   atomic.Pointer[routeTable]
	extraMu sync.Mutex
	extra   map[string]*clientNode // by gRPC address
	stop    chan struct{}
	wg      sync.WaitGroup

	// refusals cached from the nodes' answers, on the client's clock
	// (µs since epoch).
	refusals  *refusal.Cache
	epoch     time.Time
	cacheHits atomic.Int64
	// ignorePushes makes the client drop the nodes' invalidation pushes:
	// tests use it to show what holds without them (export_test.go).
	ignorePushes atomic.Bool

	leases *clientLeases // nil: off (lease.go)
}

// routeTable is the fleet's ring as the client last read it.
type routeTable struct {
	ring  *ring.Ring
	addrs map[string]string // member name -> gRPC address
}

// clientNode is one node of the fleet: its connection and its batcher.
type clientNode struct {
	addr  string
	conn  *grpc.ClientConn
	api   pb.LimiterClient
	batch *rpc.Batcher
	multi *rpc.MultiStream
}

var _ limiter.Store = (*Client)(nil)

// Stats counts a Client's work since Dial; Calls / RPCs is the mean
// number of calls per batch.
type Stats struct {
	// Calls is the number of calls sent (retries count again).
	Calls int64
	// RPCs is the number of batches (MultiStream messages or Multi RPCs) that carried them.
	RPCs int64
	// Errors is the number of batches that failed.
	Errors int64
	// Released is the number of receipts of late verdicts given back.
	Released int64
	// CacheHits is the number of calls refused from the client's refusal
	// cache, without an RPC.
	CacheHits int64
}

// Dial returns a client of the nodes at addrs (gRPC host:port), plaintext
// and with the default Config. See DialConfig.
func Dial(ctx context.Context, addrs ...string) (*Client, error) {
	return DialConfig(ctx, Config{Addrs: addrs})
}

// DialConfig returns a client of a node fleet. Connections are made
// lazily, as grpc.NewClient makes them, so Dial does not fail when a node
// is down (its calls go to the others); it fails on a bad configuration
// (no address, an address that is not host:port, unreadable certificate
// files), with an *limiter.InputError naming the field. ctx is not kept.
func DialConfig(ctx context.Context, cfg Config) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(cfg.Addrs) == 0 {
		return nil, &limiter.InputError{Field: "Addrs", Reason: "must list at least one node address"}
	}
	for i, a := range cfg.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, &limiter.InputError{Field: fmt.Sprintf("Addrs[%d]", i), Reason: fmt.Sprintf("%q is not host:port: %v", a, err)}
		}
	}
	if cfg.Timeout < 0 {
		return nil, &limiter.InputError{Field: "Timeout", Reason: "must not be negative"}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 512
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RingRefresh <= 0 {
		cfg.RingRefresh = time.Second
	}
	cfg.Addrs = append([]string(nil), cfg.Addrs...)
	opts, err := Credentials(cfg.Security)
	if err != nil {
		return nil, err
	}
	// vtproto's generated code instead of protobuf reflection, on these
	// connections only (same wire encoding; internal/codec). A codec in
	// cfg.DialOptions comes later and wins.
	opts = append(opts, codec.DialOption())
	opts = append(opts, cfg.DialOptions...)
	c := &Client{cfg: cfg, opts: opts, extra: map[string]*clientNode{}, stop: make(chan struct{}), refusals: refusal.New(cfg.RefusalCacheSize), epoch: time.Now()}
	for _, addr := range cfg.Addrs {
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("ringlimit: dial %s: %w", addr, err)
		}
		c.nodes = append(c.nodes, c.newNode(addr, conn))
	}
	if !cfg.RoundRobin {
		c.wg.Add(1)
		go c.refreshRing()
		if cfg.Leases == nil || *cfg.Leases {
			c.leases = newClientLeases(c)
		}
	}
	return c, nil
}

// refreshRing re-reads the membership every RingRefresh until Close.
func (c *Client) refreshRing() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.RingRefresh)
	defer t.Stop()
	for {
		c.readRing()
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
	}
}

// readRing rebuilds the routing table from a node's Members answer; when
// its ring version differs from the node's (another ring Config, or a
// change in flight) the table is dropped and calls go round-robin.
func (c *Client) readRing() {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	var resp *pb.MembersResponse
	if err := c.each(ctx, func(ctx context.Context, n *clientNode) error {
		r, err := n.api.Members(ctx, &pb.MembersRequest{})
		resp = r
		return err
	}); err != nil {
		return // keep the last table; calls fail over anyway
	}
	t := &routeTable{addrs: map[string]string{}}
	var names []string
	for _, m := range resp.GetMembers() {
		if memberFromPB(m).InRing() && m.GetGrpcAddr() != "" {
			names = append(names, m.GetName())
			t.addrs[m.GetName()] = m.GetGrpcAddr()
		}
	}
	slices.Sort(names)
	r, err := ring.New(names, ring.Config{})
	if err != nil || r.Version() != resp.GetRingVersion() {
		c.route.Store(nil)
		return
	}
	t.ring = r
	c.route.Store(t)
}

// ownerNode returns the node that owns key by the client's ring, dialling
// it on first use; nil when unknown.
// errNoNode: the client holds no connection to a node of that address.
var errNoNode = errors.New("ringlimit: no connection to that node")

// nodeAt is the node the client reaches at addr (nil: none).
func (c *Client) nodeAt(addr string) *clientNode {
	for _, n := range c.nodes {
		if n.addr == addr {
			return n
		}
	}
	c.extraMu.Lock()
	defer c.extraMu.Unlock()
	return c.extra[addr]
}

func (c *Client) ownerNode(key string) *clientNode {
	t := c.route.Load()
	if t == nil {
		return nil
	}
	name, err := t.ring.Owner(key)
	if err != nil {
		return nil
	}
	addr := t.addrs[name]
	for _, n := range c.nodes {
		if n.addr == addr {
			return n
		}
	}
	c.extraMu.Lock()
	defer c.extraMu.Unlock()
	if n := c.extra[addr]; n != nil {
		return n
	}
	if c.closed.Load() {
		return nil
	}
	conn, err := grpc.NewClient(addr, c.opts...)
	if err != nil {
		return nil
	}
	n := c.newNode(addr, conn)
	c.extra[addr] = n
	return n
}

func (c *Client) newNode(addr string, conn *grpc.ClientConn) *clientNode {
	api := pb.NewLimiterClient(conn)
	var invalidated func(keys [][]byte, all bool)
	if c.refusals.Enabled() {
		invalidated = c.invalidated
	}
	n := &clientNode{addr: addr, conn: conn, api: api, multi: rpc.NewMultiStream(api, invalidated)}
	n.batch = rpc.NewBatcher(addr, n.multi.Do,
		func(ctx context.Context, rs []*pb.Receipt, elapsed time.Duration) error {
			_, err := api.Release(ctx, &pb.ReleaseRequest{Receipts: rs, ElapsedUs: limiter.Micros(elapsed)})
			return err
		},
		rpc.BatcherOptions{Timeout: c.cfg.Timeout, MaxBatch: c.cfg.MaxBatch, Logger: c.cfg.Logger, Stats: &c.stats})
	return n
}

// ConsumeMany checks and records a batch, all or nothing, at the key's
// owners in the fleet. With a context made by limiter.WithRelease, an
// allowed verdict carries a Release that gives the uses back through the
// node that answered.
func (c *Client) ConsumeMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return c.call(ctx, entries, false)
}

// PeekMany answers what ConsumeMany would, recording nothing.
func (c *Client) PeekMany(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, error) {
	return c.call(ctx, entries, true)
}

func (c *Client) call(ctx context.Context, entries []limiter.Entry, peek bool) (limiter.Verdict, error) {
	if c.closed.Load() {
		return limiter.Verdict{}, limiter.ErrClosed
	}
	if len(entries) == 0 {
		return limiter.Verdict{}, &limiter.InputError{Field: "entries", Reason: "must not be empty"}
	}
	if err := checkLimits(entries); err != nil {
		return limiter.Verdict{}, err
	}
	if c.leases != nil && !peek {
		if v, ok := c.leases.h.Decide(ctx, entries); ok {
			return v, nil
		}
	}
	// One deadline for every node tried, without a context (and its timer)
	// per call: the batcher watches its queued calls' deadlines.
	now := time.Now()
	deadline := now.Add(c.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	if v, ok := c.refusals.GetAny(entries, c.micros(now)); ok {
		c.cacheHits.Add(1)
		return v, nil
	}
	wantRelease := !peek && limiter.WantsRelease(ctx)
	first := rpc.ClientCallToPB(entries) // the first attempt's call, in one allocation
	wire := first.Entries
	start := int(c.next.Add(1))
	var owner *clientNode
	if !c.cfg.RoundRobin {
		owner = c.ownerNode(entries[0].Key)
	}
	var errs []error
	for i := -1; i < len(c.nodes); i++ {
		var n *clientNode
		switch {
		case i < 0 && owner == nil:
			continue
		case i < 0:
			n = owner // the owner first, then round-robin over the others
		default:
			n = c.nodes[(start+i)%len(c.nodes)]
			if n == owner {
				continue
			}
		}
		// An attempt waits Timeout at most, within the call's deadline.
		by := now.Add(c.cfg.Timeout)
		if deadline.Before(by) {
			by = deadline
		}
		// A fresh Call per attempt: the batcher owns the one it was given.
		w := first
		if w == nil {
			w = &pb.Call{Entries: wire}
		}
		first = nil
		w.Peek, w.WantRelease = peek, wantRelease
		res, err := n.batch.SendBy(ctx, by, w)
		if err == nil {
			err = res.Err
		}
		if err == nil {
			v := res.Verdict
			if !v.Allowed && len(entries) == 1 {
				// From the moment the call was sent: the owner decided
				// later, so the cached wait ends no later than its own.
				c.refusals.Put(&entries[0], v, c.micros(now))
			}
			if wantRelease && v.Allowed && len(res.Receipts) > 0 {
				v.Release = c.releaser(n, res.Receipts, res.At, entries)
			}
			return v, nil
		}
		if now = time.Now(); !retryable(ctx, err) || !now.Before(deadline) {
			return limiter.Verdict{}, err
		}
		errs = append(errs, err)
	}
	return limiter.Verdict{}, fmt.Errorf("%w: no node answered: %w", rpc.ErrUnavailable, errors.Join(errs...))
}

// micros reads t on the client's refusal-cache clock.
func (c *Client) micros(t time.Time) int64 { return t.Sub(c.epoch).Microseconds() }

// invalidated drops cached refusals a node said may be stale.
func (c *Client) invalidated(keys [][]byte, all bool) {
	if c.ignorePushes.Load() {
		return
	}
	if all {
		c.refusals.Clear()
		return
	}
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = string(k)
	}
	c.refusals.Drop(ks)
}

// checkLimits refuses limits the wire cannot carry exactly (a window that
// is not a whole number of milliseconds would be truncated). The other
// checks, bounds included, are the node's: its bounds are its own.
func checkLimits(entries []limiter.Entry) error {
	for i := range entries {
		if err := entries[i].Limit.Validate(); err != nil {
			var ie *limiter.InputError
			if errors.As(err, &ie) {
				c := *ie
				c.Field = "entries[" + strconv.Itoa(i) + "].limit." + c.Field
				return &c
			}
			return err
		}
	}
	return nil
}

// retryable reports whether a call that failed with err may go to another
// node: the node was unreachable or shutting down (not the caller's
// deadline, not bad input, not a refused credential).
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil || !errors.Is(err, rpc.ErrUnavailable) {
		return false
	}
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied, codes.Unimplemented:
		return false
	}
	return true
}

// releaser gives back a call's uses through the node that recorded them:
// the release lives in that node's table, by the receipts' ids. It is
// idempotent: after one successful release the others do nothing.
//
// The receipts the nodes give a client carry only an id, not the key:
// the keys to drop from the refusal cache are the call's own entries'.
func (c *Client) releaser(n *clientNode, rs []*pb.Receipt, at time.Time, entries []limiter.Entry) func(context.Context) error {
	keys := make([]string, len(entries))
	for i := range entries {
		keys[i] = entries[i].Key
	}
	var mu sync.Mutex
	done := false
	return func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return nil
		}
		if c.closed.Load() {
			return limiter.ErrClosed
		}
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
			defer cancel()
		}
		_, err := n.api.Release(ctx, &pb.ReleaseRequest{Receipts: rs, ElapsedUs: limiter.Micros(time.Since(at))})
		if err != nil {
			return fmt.Errorf("ringlimit: release through %s: %w", n.addr, rpc.FromStatus(err))
		}
		done = true
		// The nodes push the keys to every client; this one need not wait
		// for the push to see its own uses back.
		c.refusals.Drop(keys)
		return nil
	}
}

// Members returns the fleet's members as the first node that answers sees
// them.
func (c *Client) Members(ctx context.Context) ([]member.Member, error) {
	var out []member.Member
	err := c.each(ctx, func(ctx context.Context, n *clientNode) error {
		resp, err := n.api.Members(ctx, &pb.MembersRequest{})
		if err != nil {
			return err
		}
		out = out[:0]
		for _, m := range resp.GetMembers() {
			out = append(out, memberFromPB(m))
		}
		return nil
	})
	return out, err
}

// Owner returns the member that owns key, as the first node that answers
// sees it.
func (c *Client) Owner(ctx context.Context, key string) (member.Member, error) {
	if key == "" {
		return member.Member{}, &limiter.InputError{Field: "key", Reason: "must not be empty"}
	}
	var out member.Member
	err := c.each(ctx, func(ctx context.Context, n *clientNode) error {
		resp, err := n.api.Owner(ctx, &pb.OwnerRequest{Key: []byte(key)})
		if err != nil {
			return err
		}
		out = memberFromPB(resp.GetOwner())
		return nil
	})
	return out, err
}

// each runs fn on the nodes in turn until one answers.
func (c *Client) each(ctx context.Context, fn func(context.Context, *clientNode) error) error {
	if c.closed.Load() {
		return limiter.ErrClosed
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	start := int(c.next.Add(1))
	var errs []error
	for i := range c.nodes {
		n := c.nodes[(start+i)%len(c.nodes)]
		err := rpc.FromStatus(fn(ctx, n))
		if err == nil {
			return nil
		}
		if !retryable(ctx, err) {
			return err
		}
		errs = append(errs, fmt.Errorf("%s: %w", n.addr, err))
	}
	return fmt.Errorf("%w: no node answered: %w", rpc.ErrUnavailable, errors.Join(errs...))
}

func memberFromPB(m *pb.Member) member.Member {
	return member.Member{Name: m.GetName(), GossipAddr: m.GetGossipAddr(), GRPCAddr: m.GetGrpcAddr(), State: m.GetState(), Version: m.GetVersion()}
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{Calls: c.stats.Calls.Load(), RPCs: c.stats.RPCs.Load(), Errors: c.stats.Errors.Load(), Released: c.stats.Released.Load(), CacheHits: c.cacheHits.Load()}
}

// Routing reports whether routing to owners is on and the client holds a ring
// that matches the nodes' (until then, calls go round-robin).
func (c *Client) Routing() bool { return c.route.Load() != nil }

// Addrs returns the node addresses the client calls.
func (c *Client) Addrs() []string { return append([]string(nil), c.cfg.Addrs...) }

// Close fails the calls still queued, waits for the RPCs in flight, and
// closes the connections. Calls after Close return limiter.ErrClosed.
func (c *Client) Close() error {
	var errs []error
	c.once.Do(func() {
		c.closed.Store(true)
		close(c.stop)
		c.wg.Wait()
		c.extraMu.Lock()
		nodes := append([]*clientNode(nil), c.nodes...)
		for _, n := range c.extra {
			nodes = append(nodes, n)
		}
		c.extraMu.Unlock()
		for _, n := range nodes {
			n.batch.Close()
			n.multi.Close()
			if err := n.conn.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	})
	return errors.Join(errs...)
}
