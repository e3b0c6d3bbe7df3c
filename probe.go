package ringlimit

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ringlimit/ringlimit/cluster"
)

// freshProbes is how many probe intervals a probe answer counts toward the
// majority rule (see membership): long enough that one late answer on a
// busy host does not lose a majority, shorter than any failure detection.
const freshProbes = 3

// prober asks every member it should count, every interval, over gRPC
// whether it is there: the health service's Check, which every node
// serves without a client credential (security.go), on a connection made
// by the node's peer dialer (TLS and the peer token as for every peer
// call). Probes run in parallel, each bounded by timeout; a round ends
// when all have answered or timed out, then round is called. It is the
// majority rule's evidence: memberlist's liveness is gossip's view, not
// whether this node can reach the member's gRPC port now.
type prober struct {
	interval, timeout, fresh time.Duration
	now                      func() time.Time
	dial                     func(addr string) (*grpc.ClientConn, error)
	members                  func() []cluster.Member
	self                     string
	round                    func()

	mu    sync.Mutex
	conns map[string]*probeConn // by member name
	last  map[string]time.Time  // by member name: send time of the newest answered probe

	cancel context.CancelFunc
	done   chan struct{}
}

type probeConn struct {
	addr string
	cc   *grpc.ClientConn
}

// proberConfig configures a prober; zero durations take defaults from
// Interval (timeout = interval, fresh = freshProbes intervals).
type proberConfig struct {
	Interval, Timeout, Fresh time.Duration
	Now                      func() time.Time
	Dial                     func(addr string) (*grpc.ClientConn, error)
	Members                  func() []cluster.Member
	Self                     string
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
		dial: cfg.Dial, members: cfg.Members, self: cfg.Self, round: cfg.Round,
		conns: map[string]*probeConn{}, last: map[string]time.Time{},
		cancel: cancel, done: make(chan struct{}),
	}
	go p.run(ctx)
	return p
}

// stop ends probing and closes the probe connections; it waits for the
// prober's goroutines. Safe to call more than once.
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
	defer p.closeAll()
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
// and departed members are not probed (they do not count while memberlist
// says so) and their connections are closed.
func (p *prober) probeAll(ctx context.Context) {
	want := map[string]string{}
	for _, m := range p.members() {
		if m.Name != p.self && m.GRPCAddr != "" && (m.State == cluster.StateAlive || m.State == cluster.StateSuspect) {
			want[m.Name] = m.GRPCAddr
		}
	}
	var wg sync.WaitGroup
	var gone []*grpc.ClientConn
	p.mu.Lock()
	for name, pc := range p.conns {
		if addr, ok := want[name]; !ok || addr != pc.addr {
			gone = append(gone, pc.cc)
			delete(p.conns, name)
		}
	}
	for name := range p.last {
		if _, ok := want[name]; !ok {
			delete(p.last, name)
		}
	}
	for name, addr := range want {
		pc := p.conns[name]
		if pc == nil {
			cc, err := p.dial(addr)
			if err != nil {
				continue // not counted; tried again next round
			}
			pc = &probeConn{addr: addr, cc: cc}
			p.conns[name] = pc
		}
		wg.Go(func() { p.probeOne(ctx, name, pc.cc) })
	}
	p.mu.Unlock()
	for _, cc := range gone { // not under mu: answered must never wait
		cc.Close()
	}
	wg.Wait()
}

func (p *prober) probeOne(ctx context.Context, name string, cc *grpc.ClientConn) {
	sent := p.now()
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	// Any answer will do, NOT_SERVING included: the question is whether
	// this node reaches the member, not whether the member is ready.
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		if cc.GetState() == connectivity.TransientFailure {
			// The dialer's backoff would keep a healed member uncounted
			// for up to its MaxDelay; probes are paced already.
			cc.ResetConnectBackoff()
		}
		return
	}
	p.mu.Lock()
	if t, ok := p.last[name]; !ok || sent.After(t) {
		p.last[name] = sent
	}
	p.mu.Unlock()
}

func (p *prober) closeAll() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[string]*probeConn{}
	p.mu.Unlock()
	for _, pc := range conns {
		pc.cc.Close()
	}
}
