package cluster

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// freshProbes is how many probe intervals a probe answer counts toward the
// majority rule (see Routing): long enough that one late answer on a
// busy host does not lose a majority, shorter than any failure detection.
const freshProbes = 3

// prober asks every member it should count, every interval, over gRPC
// whether it is there: the health service's Check, which every node
// serves without a client credential (security.go), on the connection the
// router forwards to that member on (peer.Client.Conn: the node's
// peer dialer, TLS and peer token included). Reusing it opens no second
// connection per peer, and the answer is about the path calls take.
// Probes run in parallel, each bounded by timeout; a round ends when all
// have answered or timed out, then round is called. It is the majority
// rule's evidence: memberlist's liveness is gossip's view, not whether
// this node can reach the member's gRPC port now.
type prober struct {
	interval, timeout, fresh time.Duration
	now                      func() time.Time
	conn                     func(name string) (*grpc.ClientConn, error)
	members                  func() []Member
	self                     string
	round                    func()

	mu   sync.Mutex
	last map[string]time.Time // by member name: send time of the newest answered probe

	cancel context.CancelFunc
	done   chan struct{}
}

// proberConfig configures a prober; zero durations take defaults from
// Interval (timeout = interval, fresh = freshProbes intervals).
type proberConfig struct {
	Interval, Timeout, Fresh time.Duration
	Now                      func() time.Time
	// Conn returns the connection to a member (the router's; not closed
	// by the prober).
	Conn    func(name string) (*grpc.ClientConn, error)
	Members func() []Member
	Self    string
	// Round is called after each round; it must not block for long.
	Round func()
}

// startProber starts probing until ctx is done or stop is called.
func startProber(ctx context.Context, cfg proberConfig) *prober {
	if cfg.Interval <= 0 {
		cfg.Interval = 200 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = cfg.Interval
	}
	if cfg.Fresh <= 0 {
		cfg.Fresh = freshProbes * cfg.Interval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Round == nil {
		cfg.Round = func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &prober{
		interval: cfg.Interval, timeout: cfg.Timeout, fresh: cfg.Fresh, now: cfg.Now,
		conn: cfg.Conn, members: cfg.Members, self: cfg.Self, round: cfg.Round,
		last:   map[string]time.Time{},
		cancel: cancel, done: make(chan struct{}),
	}
	go p.run(ctx)
	return p
}

// stop ends probing; it waits for the prober's goroutines. Safe to call
// more than once.
func (p *prober) stop() {
	p.cancel()
	<-p.done
}

// answered reports whether name answered a probe sent within fresh of now.
func (p *prober) answered(name string, now time.Time) bool {
	p.mu.Lock()
	t, ok := p.last[name]
	p.mu.Unlock()
	return ok && now.Sub(t) < p.fresh
}

func (p *prober) run(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		p.probeAll(ctx)
		if ctx.Err() != nil {
			return
		}
		p.round()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeAll probes every alive or suspect member once, in parallel. Dead
// and departed members are not probed: they do not count while memberlist
// says so.
func (p *prober) probeAll(ctx context.Context) {
	want := map[string]bool{}
	for _, m := range p.members() {
		if m.Name != p.self && m.GRPCAddr != "" && (m.State == StateAlive || m.State == StateSuspect) {
			want[m.Name] = true
		}
	}
	p.mu.Lock()
	for name := range p.last {
		if !want[name] {
			delete(p.last, name)
		}
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for name := range want {
		cc, err := p.conn(name)
		if err != nil {
			continue // not counted; tried again next round
		}
		wg.Go(func() { p.probeOne(ctx, name, cc) })
	}
	wg.Wait()
}

func (p *prober) probeOne(ctx context.Context, name string, cc *grpc.ClientConn) {
	sent := p.now()
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	// Any answer will do, NOT_SERVING included: the question is whether
	// this node reaches the member, not whether the member is ready.
	// A failed probe leaves the connection's backoff alone: a healed
	// member is counted again within the dialer's MaxDelay (2 s), the
	// conservative direction. (Resetting it every round raced inside
	// grpc-go: ResetConnectBackoff ranges over the ClientConn's subconns
	// after releasing its lock, while the balancer adds one.)
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		return
	}
	p.mu.Lock()
	if t, ok := p.last[name]; !ok || sent.After(t) {
		p.last[name] = sent
	}
	p.mu.Unlock()
}
