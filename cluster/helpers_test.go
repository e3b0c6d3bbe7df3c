package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// testConfig is a local-profile node on 127.0.0.1 with a free port.
func testConfig(name string, join ...string) Config {
	return Config{
		Name:       name,
		GossipAddr: "127.0.0.1:0",
		GRPCAddr:   "127.0.0.1:9" + name[len(name)-1:],
		Version:    "test",
		Profile:    ProfileLocal,
		Join:       join,
	}
}

// testLogger shows memberlist's logs with RINGLIMIT_TEST_LOG=1.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("RINGLIMIT_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
}

func start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// startCluster starts n nodes, n1 first and the others joining it, and
// waits until all agree on the ring.
func startCluster(t testing.TB, n int, mutate func(*Config)) []*Cluster {
	t.Helper()
	var nodes []*Cluster
	for i := 1; i <= n; i++ {
		var cfg Config
		if i == 1 {
			cfg = testConfig("n1")
		} else {
			cfg = testConfig(fmt.Sprintf("n%d", i), nodes[0].Local().GossipAddr)
		}
		if mutate != nil {
			mutate(&cfg)
		}
		nodes = append(nodes, start(t, cfg))
	}
	waitAgree(t, nodes, n)
	return nodes
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	begin := time.Now()
	for !cond() {
		if time.Since(begin) > timeout {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(begin)
}

// waitAgree waits until every node's ring has size members and one version.
func waitAgree(t testing.TB, nodes []*Cluster, size int) time.Duration {
	t.Helper()
	return waitFor(t, 10*time.Second, fmt.Sprintf("%d nodes to agree on a %d-member ring", len(nodes), size), func() bool {
		v := nodes[0].Ring().Version()
		for _, c := range nodes {
			if r := c.Ring(); r.Len() != size || r.Version() != v {
				return false
			}
		}
		return true
	})
}

// partition cuts the gossip network between sides: a node's transport drops
// what it sends to, and refuses connections to, a node on another side.
// With every node wrapped, that cuts both directions.
type partition struct {
	mu   sync.Mutex
	side map[string]int // gossip address -> side
	cut  bool
}

func newPartition() *partition { return &partition{side: map[string]int{}} }

func (p *partition) set(cut bool) {
	p.mu.Lock()
	p.cut = cut
	p.mu.Unlock()
}

func (p *partition) blocked(from, to string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut && p.side[from] != p.side[to]
}

// wrap returns a Config.wrapTransport that puts the node on side.
func (p *partition) wrap(side int) func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
	return func(nt memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
		self := net.JoinHostPort("127.0.0.1", fmt.Sprint(nt.(*memberlist.NetTransport).GetAutoBindPort()))
		p.mu.Lock()
		p.side[self] = side
		p.mu.Unlock()
		return &faultTransport{NodeAwareTransport: nt, p: p, self: self}
	}
}

type faultTransport struct {
	memberlist.NodeAwareTransport
	p    *partition
	self string
}

var errCut = fmt.Errorf("test: network cut")

func (f *faultTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if f.p.blocked(f.self, addr) {
		return time.Now(), nil // dropped silently, like a lost datagram
	}
	return f.NodeAwareTransport.WriteTo(b, addr)
}

func (f *faultTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if f.p.blocked(f.self, a.Addr) {
		return time.Now(), nil
	}
	return f.NodeAwareTransport.WriteToAddress(b, a)
}

func (f *faultTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if f.p.blocked(f.self, addr) {
		return nil, errCut
	}
	return f.NodeAwareTransport.DialTimeout(addr, timeout)
}

func (f *faultTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if f.p.blocked(f.self, a.Addr) {
		return nil, errCut
	}
	return f.NodeAwareTransport.DialAddressTimeout(a, timeout)
}
