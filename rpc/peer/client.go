package peer

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// ClientConfig configures a Client. Fields marked required have no default.
type ClientConfig struct {
	// Self is this node's name, sent with every Forward. Required.
	Self string
	// Members gives peers' gRPC addresses. Required.
	Members owner.Membership
	// Dial opens a connection to a peer's gRPC address. Required.
	Dial func(addr string) (*grpc.ClientConn, error)
	// RingVersion, when set, reads the version of the ring this node
	// routes by (sent with each Forward, for the receiver's logs).
	RingVersion func() uint64
	// Late receives the receipts of verdicts that arrived after their
	// caller stopped waiting, so their uses are given back (the router's
	// ReleaseAt). Default: they are dropped, and stay counted.
	Late func(ctx context.Context, sentTo string, rs []owner.Receipt, elapsed time.Duration) error
	// ForwardTimeout caps a forward whose caller set no deadline. Default 1 s.
	ForwardTimeout time.Duration
	// Logger receives failed give-backs. Default slog.Default().
	Logger *slog.Logger
}

// Client is the gRPC end of owner.Peers: one connection and one batching
// forwarder per peer, made on first use; a peer whose address changed (a
// restart on another port) is redialled.
type Client struct {
	cfg      ClientConfig
	fwdStats rpc.BatcherStats

	mu      sync.Mutex
	peers   map[string]*peer     // by name
	addrs   map[string]string    // peers' addresses learnt from their requests
	back    map[string]time.Time // members that rejoined: until then, forwards wait for the connection
	retired map[*peer]struct{}   // replaced on a rejoin, draining before they close
	closed  bool
}

var _ owner.Peers = (*Client)(nil)

// peer is one other node: its connection and its forwarder.
type peer struct {
	name   string
	addr   string
	conn   *grpc.ClientConn
	client pb.PeerClient
	fwd    *rpc.Batcher
	stream *rpc.Stream[pb.ForwardRequest, pb.ForwardResponse] // fwd's RPCs
	// repl carries Replicates (a peer of an older version, without
	// ReplicateStream, gets unary ones).
	repl *rpc.Stream[pb.StateRequest, pb.StateResponse]
	// packs: the peer's last Replicate answer said it reads packed logs
	// (StateResponse.packs_logs). Cleared when the replication stream
	// breaks: the peer may have restarted as an older version.
	packs atomic.Bool
	// backUntil (unix ns): the member (re)joined the ring just now; until
	// then forwards wait for the connection to come up instead of failing
	// at once on the one its restart broke.
	backUntil atomic.Int64
}

// NewClient returns a client; it dials nothing until a peer is called.
func NewClient(cfg ClientConfig) (*Client, error) {
	switch {
	case cfg.Self == "":
		return nil, fmt.Errorf("%w: peer.ClientConfig.Self is required", limiter.ErrInvalid)
	case cfg.Members == nil:
		return nil, fmt.Errorf("%w: peer.ClientConfig.Members is required", limiter.ErrInvalid)
	case cfg.Dial == nil:
		return nil, fmt.Errorf("%w: peer.ClientConfig.Dial is required", limiter.ErrInvalid)
	}
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Client{cfg: cfg, peers: map[string]*peer{}, addrs: map[string]string{}, back: map[string]time.Time{}, retired: map[*peer]struct{}{}}, nil
}

// waitReady makes a peer RPC (bounded by its deadline) wait for the
// connection to come up rather than fail at once: a node restarted at the
// same address is reconnecting when its ring change sends it state.
var waitReady = grpc.WaitForReady(true)

// peer returns the peer for a member name, connecting on first use.
func (c *Client) peer(name string) (*peer, error) {
	addr, ok := c.cfg.Members.Addr(name)
	if !ok {
		// A node that asked for keys before this node saw it join.
		addr, ok = c.learned(name)
	}
	if !ok || addr == "" {
		return nil, fmt.Errorf("%w: no gRPC address for member %q", owner.ErrUnavailable, name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.peers[name]; p != nil && p.addr == addr {
		return p, nil
	} else if p != nil {
		p.close()
	}
	if c.closed {
		return nil, owner.ErrShuttingDown
	}
	conn, err := c.cfg.Dial(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s (%s): %v", owner.ErrUnavailable, name, addr, err)
	}
	p := &peer{name: name, addr: addr, conn: conn, client: pb.NewPeerClient(conn)}
	if until, ok := c.back[name]; ok {
		p.backUntil.Store(until.UnixNano())
		delete(c.back, name)
	}
	client := p.client
	// Forwards go over one long-lived stream to the peer (a peer of an
	// older version, without it, gets unary Forwards). For a second after
	// the peer (re)joined, opening the stream, like a unary forward, waits
	// for the connection to come up instead of failing on the one its
	// restart broke.
	p.stream = rpc.NewStream(rpc.StreamEnds[pb.ForwardRequest, pb.ForwardResponse]{
		Open: func(ctx context.Context) (grpc.BidiStreamingClient[pb.ForwardRequest, pb.ForwardResponse], error) {
			return client.ForwardStream(ctx, p.callOptions()...)
		},
		Unary: func(ctx context.Context, req *pb.ForwardRequest) (*pb.ForwardResponse, error) {
			return client.Forward(ctx, req, p.callOptions()...)
		},
		SetID: func(req *pb.ForwardRequest, id uint64) { req.Id = id },
		ID:    func(resp *pb.ForwardResponse) uint64 { return resp.GetId() },
	})
	// Replication waits for the connection like the unary Replicate it
	// replaces (waitReady), within the shipment's deadline.
	p.repl = rpc.NewStream(rpc.StreamEnds[pb.StateRequest, pb.StateResponse]{
		Open: func(ctx context.Context) (grpc.BidiStreamingClient[pb.StateRequest, pb.StateResponse], error) {
			return client.ReplicateStream(ctx, waitReady)
		},
		Unary: func(ctx context.Context, req *pb.StateRequest) (*pb.StateResponse, error) {
			if req.GetPackedLogs() != nil {
				// Packed while the peer still said it reads them, but it
				// has just answered the stream UNIMPLEMENTED: an older
				// version, which would read every log as empty. The
				// shipment fails; the next goes whole and unpacked.
				p.packs.Store(false)
				return nil, status.Error(codes.Unavailable, "ringlimit: replication: the peer has no ReplicateStream (an older version) and cannot read packed logs; the next shipment goes unpacked")
			}
			return client.Replicate(ctx, req, waitReady)
		},
		SetID:  func(req *pb.StateRequest, id uint64) { req.Id = id },
		ID:     func(resp *pb.StateResponse) uint64 { return resp.GetId() },
		Broken: func() { p.packs.Store(false) },
	})
	p.fwd = rpc.NewBatcher(name,
		func(ctx context.Context, calls []*pb.Call) ([]*pb.CallResult, error) {
			var version uint64
			if c.cfg.RingVersion != nil {
				version = c.cfg.RingVersion()
			}
			resp, err := p.stream.Do(ctx, &pb.ForwardRequest{Calls: calls, From: c.cfg.Self, RingVersion: version, LeanReceipts: true})
			return resp.GetResults(), err
		},
		func(ctx context.Context, rs []*pb.Receipt, elapsed time.Duration) error {
			// A late verdict's uses may have been recorded further along
			// than this peer (it passed the call on): the router gives
			// each back where its receipt says.
			if c.cfg.Late == nil {
				return nil
			}
			// The Batcher completed their keys and limits from the calls.
			return c.cfg.Late(ctx, name, receiptsFromPB(rs, nil, name), elapsed)
		},
		rpc.BatcherOptions{Timeout: c.cfg.ForwardTimeout, Logger: c.cfg.Logger, Stats: &c.fwdStats})
	c.peers[name] = p
	return p, nil
}

// Forward sends call to node: batched with the calls queued for it, or
// in an RPC of its own when call.Direct.
func (c *Client) Forward(ctx context.Context, node string, call owner.Call) (owner.Result, error) {
	p, err := c.peer(node)
	if err != nil {
		return owner.Result{}, err
	}
	w := rpc.CallToPB(call.Entries)
	w.Peek, w.Hops, w.Final = call.Peek, call.Hops, call.Final
	var res rpc.Result
	if call.Direct {
		res, err = p.fwd.Direct(ctx, w)
	} else {
		res, err = p.fwd.Send(ctx, w)
	}
	if err != nil {
		return owner.Result{}, err
	}
	return resultFromRPC(res, call, node), nil
}

// ForwardMany sends independent calls to node together: in one request
// when none is in flight to it, else queued together for the next.
func (c *Client) ForwardMany(ctx context.Context, node string, calls []owner.Call) []owner.Result {
	out := make([]owner.Result, len(calls))
	p, err := c.peer(node)
	if err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	ws := make([]*pb.Call, len(calls))
	for i, call := range calls {
		ws[i] = rpc.CallToPB(call.Entries)
		ws[i].Peek, ws[i].Hops, ws[i].Final = call.Peek, call.Hops, call.Final
	}
	deadline := time.Now().Add(c.cfg.ForwardTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	res := make([]rpc.Result, len(calls))
	errs := make([]error, len(calls))
	p.fwd.SendMany(ctx, deadline, ws, res, errs)
	for i := range out {
		if errs[i] != nil {
			out[i].Err = errs[i]
			continue
		}
		out[i] = resultFromRPC(res[i], calls[i], node)
	}
	return out
}

// resultFromRPC is node's answer to call: its receipts read from the
// wire (and completed from the call) only when the caller may give the
// uses back.
func resultFromRPC(res rpc.Result, call owner.Call, node string) owner.Result {
	out := owner.Result{Verdict: res.Verdict, At: res.At, Err: res.Err}
	if !call.NoReceipts {
		out.Receipts = receiptsFromPB(res.Receipts, call.Entries, node)
	}
	return out
}

// Fetch asks node for counters' state.
func (c *Client) Fetch(ctx context.Context, node string, req owner.FetchRequest) (owner.FetchAnswer, error) {
	p, err := c.peer(node)
	if err != nil {
		return owner.FetchAnswer{}, err
	}
	var opts []grpc.CallOption
	if !req.FailFast {
		opts = append(opts, waitReady)
	}
	resp, err := p.client.Fetch(ctx, &pb.FetchRequest{Counters: CountersToPB(req.Counters), From: req.From, FromAddr: req.FromAddr, NoClaim: req.NoClaim}, opts...)
	if err != nil {
		return owner.FetchAnswer{}, rpc.FromStatus(err)
	}
	ans := owner.FetchAnswer{States: rpc.StatesFromPB(resp.GetStates())}
	for _, h := range resp.GetHeld() {
		ans.Held = append(ans.Held, owner.Held{Key: string(h.GetKey()), Holder: h.GetHolder()})
	}
	return ans, nil
}

// HandOff moves states to node.
func (c *Client) HandOff(ctx context.Context, node string, b owner.StateBatch) (owner.StateAck, error) {
	return c.states(ctx, node, b, true)
}

// Replicate ships states to node.
func (c *Client) Replicate(ctx context.Context, node string, b owner.StateBatch) (owner.StateAck, error) {
	return c.states(ctx, node, b, false)
}

func (c *Client) states(ctx context.Context, node string, b owner.StateBatch, handoff bool) (owner.StateAck, error) {
	p, err := c.peer(node)
	if err != nil {
		return owner.StateAck{}, err
	}
	req := &pb.StateRequest{From: b.From, RingVersion: b.RingVersion, Final: b.Final}
	if handoff {
		req.States = rpc.StatesToPB(b.States)
		resp, err := p.client.HandOff(ctx, req, waitReady)
		if err != nil {
			return owner.StateAck{}, rpc.FromStatus(err)
		}
		return owner.StateAck{MergesDeltas: resp.GetMergesDeltas(), Missing: CountersFromPB(resp.GetMissing())}, nil
	}
	// Packed only to a peer that said it reads them: an older one would
	// take every log for empty.
	if p.packs.Load() {
		pk := packers.Get().(*rpc.Packer)
		// Do has sent the request (marshalled it) by the time it returns,
		// answered or not: the buffers are free again.
		defer func() {
			if pk.Size() <= 4096 {
				packers.Put(pk)
			}
		}()
		req.States, req.PackedLogs = pk.Pack(b.States)
	} else {
		req.States = rpc.StatesToPB(b.States)
	}
	resp, err := p.repl.Do(ctx, req)
	if err != nil {
		return owner.StateAck{}, rpc.FromStatus(err)
	}
	if e := resp.GetError(); e != nil {
		return owner.StateAck{}, rpc.ErrorFromPB(e)
	}
	p.packs.Store(resp.GetPacksLogs())
	return owner.StateAck{MergesDeltas: resp.GetMergesDeltas(), Missing: CountersFromPB(resp.GetMissing())}, nil
}

// packers keep the buffers of replication requests for the next (see
// rpc.Packer).
var packers = sync.Pool{New: func() any { return new(rpc.Packer) }}

// Release gives back uses node recorded.
func (c *Client) Release(ctx context.Context, node string, rs []owner.Receipt, elapsed time.Duration) error {
	p, err := c.peer(node)
	if err != nil {
		return err
	}
	_, err = p.client.Release(ctx, &pb.ReleaseRequest{Receipts: ReceiptsToPB(rs), ElapsedUs: limiter.Micros(elapsed)})
	return rpc.FromStatus(err)
}

// Invalidate tells node that uses of keys were given back.
func (c *Client) Invalidate(ctx context.Context, node string, keys []string) error {
	p, err := c.peer(node)
	if err != nil {
		return err
	}
	req := &pb.InvalidateRequest{Keys: make([][]byte, len(keys))}
	for i, k := range keys {
		req.Keys[i] = []byte(k)
	}
	_, err = p.client.Invalidate(ctx, req)
	return rpc.FromStatus(err)
}

// Rejoined readies the way to a member that (re)joined the ring: a node
// restarted at the same address must not wait out the reconnect backoff
// its exit left on the old connection, so the next call dials afresh
// (gRPC's ResetConnectBackoff would do it in place, but it races with the
// balancer adding a subconnection). For a second, forwards to it wait for
// the new connection instead of failing fast. The old connection carries
// what it has queued and in flight, then closes.
func (c *Client) Rejoined(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.back[node] = time.Now().Add(time.Second)
	p := c.peers[node]
	if p == nil {
		return
	}
	delete(c.peers, node)
	c.retired[p] = struct{}{}
	time.AfterFunc(2*c.cfg.ForwardTimeout, func() {
		c.mu.Lock()
		_, ok := c.retired[p]
		delete(c.retired, p)
		c.mu.Unlock()
		if ok {
			p.close()
		}
	})
}

// Conn returns the connection this node forwards to member name on (made
// on first use, as for a forward), so a caller that checks whether the
// member is reachable checks the very connection calls travel on and
// opens no other. The client closes it (Close, or when the member's
// address changes); callers must not.
func (c *Client) Conn(name string) (*grpc.ClientConn, error) {
	p, err := c.peer(name)
	if err != nil {
		return nil, err
	}
	return p.conn, nil
}

// Learn remembers a peer's gRPC address given in a request, for a peer
// this node's membership does not know yet.
func (c *Client) Learn(name, addr string) {
	if name == "" || addr == "" {
		return
	}
	c.mu.Lock()
	c.addrs[name] = addr
	c.mu.Unlock()
}

func (c *Client) learned(name string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.addrs[name]
	return a, ok
}

// Stats counts Forward RPCs, the calls they carried (Calls/RPCs is the
// mean batch), failures and late releases.
func (c *Client) Stats() *rpc.BatcherStats { return &c.fwdStats }

// PeerStats returns the forward counters of each peer called, by name.
func (c *Client) PeerStats() map[string]*rpc.BatcherStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]*rpc.BatcherStats, len(c.peers))
	for name, p := range c.peers {
		out[name] = p.fwd.Stats()
	}
	return out
}

// Close closes every connection; calls after it fail.
func (c *Client) Close() error {
	c.mu.Lock()
	all := make([]*peer, 0, len(c.peers)+len(c.retired))
	for _, p := range c.peers {
		all = append(all, p)
	}
	for p := range c.retired {
		all = append(all, p)
	}
	c.peers = map[string]*peer{}
	clear(c.retired)
	c.closed = true
	c.mu.Unlock()
	for _, p := range all {
		p.close()
	}
	return nil
}

// callOptions are a forward's: within a second of the peer's (re)join,
// wait for its connection to come up.
func (p *peer) callOptions() []grpc.CallOption {
	if time.Now().UnixNano() < p.backUntil.Load() {
		return []grpc.CallOption{waitReady}
	}
	return nil
}

func (p *peer) close() {
	p.fwd.Close()
	p.stream.Close()
	p.repl.Close()
	_ = p.conn.Close()
}
