package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestThreeNodesFormRing(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	want := []string{"n1", "n2", "n3"}
	for _, c := range nodes {
		if got := c.Ring().Members(); !slices.Equal(got, want) {
			t.Fatalf("%s: ring members %v, want %v", c.Local().Name, got, want)
		}
	}
	// Metadata travels: every node knows every other's gRPC address.
	for _, c := range nodes {
		for _, o := range nodes {
			lo := o.Local()
			m, ok := c.Member(lo.Name)
			if !ok || m.GRPCAddr != lo.GRPCAddr || m.Version != "test" || m.State != StateAlive || m.GossipAddr != lo.GossipAddr {
				t.Fatalf("%s sees %s as %+v (ok=%v), want %+v", c.Local().Name, lo.Name, m, ok, lo)
			}
		}
		if len(c.Members()) != 3 {
			t.Fatalf("Members = %+v", c.Members())
		}
	}
	if _, port, _ := net.SplitHostPort(nodes[0].Local().GossipAddr); port == "0" {
		t.Fatal("Local().GossipAddr has port 0, want the bound port")
	}
	if h := nodes[0].Health(); h < 0 {
		t.Fatalf("Health = %d", h)
	}
	owner, _ := nodes[0].Ring().Owner("{user1}:a")
	for _, c := range nodes {
		if o, _ := c.Ring().Owner("{user1}:b"); o != owner {
			t.Fatalf("nodes disagree on the owner: %s vs %s", o, owner)
		}
	}
}

func TestFourthNodeJoins(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	ch, cancel := nodes[0].Subscribe()
	defer cancel()
	first := <-ch
	if first.Prev != nil || first.Next != nodes[0].Ring() {
		t.Fatalf("first Change = %+v, want {nil, current}", first)
	}
	n4 := start(t, testConfig("n4", nodes[1].Local().GossipAddr))
	d := waitAgree(t, append(nodes, n4), 4)
	t.Logf("4th node joined: all rings agree after %v", d)

	last := first.Next
	for last.Len() != 4 {
		select {
		case c := <-ch:
			if c.Prev != last {
				t.Fatalf("Change.Prev %v is not the last Next %v", c.Prev, last)
			}
			last = c.Next
		case <-time.After(5 * time.Second):
			t.Fatalf("no Change to a 4-member ring; last %v", last)
		}
	}
	if !last.Has("n4") {
		t.Fatalf("ring %v lacks n4", last)
	}
}

func TestGracefulLeave(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	begin := time.Now()
	if err := nodes[2].Leave(ctx); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	left := time.Since(begin)
	d := waitAgree(t, nodes[:2], 2)
	t.Logf("graceful leave: Leave took %v; survivors had dropped the node %v after it returned", left, d)
	for _, c := range nodes[:2] {
		if m, ok := c.Member("n3"); !ok || m.State != StateLeft {
			t.Fatalf("%s sees n3 as %+v, want left", c.Local().Name, m)
		}
		if c.Ring().Has("n3") {
			t.Fatal("n3 still on the ring")
		}
	}
	if err := nodes[2].Leave(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Leave = %v, want ErrClosed", err)
	}
	nodes[2].Close() // idempotent
}

func TestCrashDeclaredDead(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	nodes[2].Close() // no leave message: the others must detect it
	d := waitFor(t, 10*time.Second, "survivors to drop n3", func() bool {
		return !nodes[0].Ring().Has("n3") && !nodes[1].Ring().Has("n3")
	})
	t.Logf("local profile: a node closed without leaving was declared dead after %v", d)
	for _, c := range nodes[:2] {
		if m, _ := c.Member("n3"); m.State != StateDead {
			t.Fatalf("%s sees n3 as %q, want dead", c.Local().Name, m.State)
		}
	}
	waitAgree(t, nodes[:2], 2)
}

func TestSecretKey(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	n1 := start(t, func() Config { c := testConfig("n1"); c.SecretKey = key; return c }())
	seed := n1.Local().GossipAddr

	ok := testConfig("n2", seed)
	ok.SecretKey = key
	n2 := start(t, ok)
	waitAgree(t, []*Cluster{n1, n2}, 2)

	for _, tc := range []struct {
		name string
		key  []byte
	}{
		{"wrong key", []byte("fedcba9876543210fedcba9876543210")},
		{"no key", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig("n3", seed)
			cfg.SecretKey = tc.key
			cfg.Logger = testLogger(t)
			ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
			defer cancel()
			c, err := Start(ctx, cfg)
			if err == nil {
				c.Close()
				t.Fatal("Start joined with a wrong key")
			}
			if !errors.Is(err, ErrJoin) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Start = %v, want ErrJoin and DeadlineExceeded", err)
			}
			if n1.Ring().Has("n3") {
				t.Fatal("n3 got onto the ring")
			}
		})
	}
}

func TestJoinByDNSName(t *testing.T) {
	n1 := start(t, testConfig("n1"))
	_, port, _ := net.SplitHostPort(n1.Local().GossipAddr)
	n2 := start(t, testConfig("n2", "localhost:"+port))
	waitAgree(t, []*Cluster{n1, n2}, 2)

	addrs, err := resolveSeeds(context.Background(), []string{"localhost:" + port, "127.0.0.1:1"})
	if err != nil || !slices.Contains(addrs, "127.0.0.1:"+port) || !slices.Contains(addrs, "127.0.0.1:1") {
		t.Fatalf("resolveSeeds = %v, %v", addrs, err)
	}
}

func TestJoinOnlySelfIsOneNodeCluster(t *testing.T) {
	n1 := start(t, testConfig("n1"))
	// A node whose Join list names only itself (the first pod behind a
	// headless service) starts alone instead of retrying forever. Simulate by
	// restarting on a known port.
	addr := n1.Local().GossipAddr
	n1.Close()
	cfg := testConfig("n1b", addr)
	cfg.GossipAddr = addr
	c := start(t, cfg)
	if c.Ring().Len() != 1 {
		t.Fatalf("ring = %v", c.Ring())
	}
}

func TestPartitionHealsByRejoin(t *testing.T) {
	p := newPartition()
	var nodes []*Cluster
	for i, side := range []int{0, 0, 1, 1} {
		cfg := testConfig(fmt.Sprintf("n%d", i+1))
		if i > 0 {
			// Everyone seeds from n1 and re-joins fast.
			cfg.Join = []string{nodes[0].Local().GossipAddr}
		}
		cfg.RejoinInterval = 200 * time.Millisecond
		cfg.wrapTransport = p.wrap(side)
		nodes = append(nodes, start(t, cfg))
	}
	waitAgree(t, nodes, 4)

	p.set(true)
	d := waitFor(t, 10*time.Second, "each side to drop the other", func() bool {
		return nodes[0].Ring().Len() == 2 && nodes[1].Ring().Len() == 2 &&
			nodes[2].Ring().Len() == 2 && nodes[3].Ring().Len() == 2
	})
	t.Logf("partition: sides split after %v: %v | %v", d, nodes[0].Ring().Members(), nodes[2].Ring().Members())
	if nodes[0].Ring().Version() == nodes[2].Ring().Version() {
		t.Fatal("both sides of a partition have the same ring")
	}

	p.set(false)
	d = waitAgree(t, nodes, 4)
	t.Logf("partition healed: all four agree again after %v", d)
}

func TestSubscribeCloseAndCancel(t *testing.T) {
	n1 := start(t, testConfig("n1"))
	ch, cancel := n1.Subscribe()
	<-ch
	cancel()
	cancel() // idempotent
	if _, ok := <-ch; ok {
		t.Fatal("channel open after cancel")
	}
	ch2, cancel2 := n1.Subscribe()
	defer cancel2()
	<-ch2
	n1.Close()
	if _, ok := <-ch2; ok {
		t.Fatal("channel open after Close")
	}
	ch3, _ := n1.Subscribe()
	if _, ok := <-ch3; ok {
		t.Fatal("Subscribe after Close gave an open channel")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		field string
		cfg   Config
	}{
		{"Name", Config{}},
		{"GossipAddr", Config{Name: "a", GossipAddr: "nope"}},
		{"AdvertiseAddr", Config{Name: "a", AdvertiseAddr: "1.2.3.4"}},
		{"Join", Config{Name: "a", Join: []string{"host-without-port"}}},
		{"Profile", Config{Name: "a", Profile: "wan"}},
		{"SecretKey", Config{Name: "a", SecretKey: []byte("short")}},
		{"GRPCAddr", Config{Name: "a", GRPCAddr: string(make([]byte, 600))}},
		{"Ring.Load", Config{Name: "a", Ring: ringConfig(0.5)}},
	} {
		err := tc.cfg.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Validate(%+v) = %v, want a ConfigError naming %s", tc.cfg, err, tc.field)
		}
		if _, err := Start(context.Background(), tc.cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Start with bad %s = %v", tc.field, err)
		}
	}
	if err := (Config{Name: "a"}).Validate(); err != nil {
		t.Errorf("minimal config: %v", err)
	}
}

// A gossip port another process holds (UDP or TCP) is ErrBind, never
// ErrJoin: the operator must learn that the port is taken, not that the
// cluster is unreachable.
func TestStartCannotBind(t *testing.T) {
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	for name, addr := range map[string]string{"udp taken": udp.LocalAddr().String(), "tcp taken": tcp.Addr().String()} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig("n1")
			cfg.GossipAddr = addr
			c, err := Start(t.Context(), cfg)
			if err == nil {
				c.Close()
				t.Fatalf("Start on %s, which is taken, succeeded", addr)
			}
			if !errors.Is(err, ErrBind) || errors.Is(err, ErrJoin) || !strings.Contains(err.Error(), addr) {
				t.Fatalf("Start on a taken port: %v; want ErrBind naming %s", err, addr)
			}
		})
	}
}
