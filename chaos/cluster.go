package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// Cluster is a set of node processes on loopback and the harness's gRPC
// clients to them. Nodes are placed in slots at creation; a slot's node may
// be started, killed and restarted any number of times.
type Cluster struct {
	Args  NodeArgs
	Procs []*Proc

	conns   []*grpc.ClientConn
	clients map[string]pb.LimiterClient

	mu sync.Mutex
	up map[string]bool // nodes the load may send calls to
}

// ClusterConfig places a cluster.
type ClusterConfig struct {
	// Nodes is the number of slots.
	Nodes int
	// Args are the nodes' flags.
	Args NodeArgs
	// LogDir receives one log file per node.
	LogDir string
	// Net is the third octet of the nodes' addresses 127.77.Net.(slot+2),
	// distinct per concurrent run.
	Net int
	// UIDBase, when >= 0, runs slot i as user UIDBase+i (needed for
	// partitions); -1 runs nodes as the harness's user.
	UIDBase int
}

// NewCluster places the nodes (none started).
func NewCluster(cfg ClusterConfig) (*Cluster, error) {
	c := &Cluster{Args: cfg.Args, clients: map[string]pb.LimiterClient{}, up: map[string]bool{}}
	for i := range cfg.Nodes {
		uid := -1
		if cfg.UIDBase >= 0 {
			uid = cfg.UIDBase + i
		}
		p, err := newProc(fmt.Sprintf("n%d", i+1), fmt.Sprintf("127.77.%d.%d", cfg.Net, i+2), uid, cfg.LogDir)
		if err != nil {
			c.Close()
			return nil, err
		}
		conn, err := grpc.NewClient(p.GRPCAddr(),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond}, MinConnectTimeout: time.Second}))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("chaos: gRPC client for %s: %w", p.Name, err)
		}
		c.Procs = append(c.Procs, p)
		c.conns = append(c.conns, conn)
		c.clients[p.Name] = pb.NewLimiterClient(conn)
	}
	return c, nil
}

// Proc returns the node named name.
func (c *Cluster) Proc(name string) *Proc {
	for _, p := range c.Procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Client returns the gRPC client of node name.
func (c *Cluster) Client(name string) pb.LimiterClient { return c.clients[name] }

// SetUp marks a node as usable (or not) by the load.
func (c *Cluster) SetUp(name string, up bool) {
	c.mu.Lock()
	c.up[name] = up
	c.mu.Unlock()
}

// Up lists the nodes the load may use, in slot order.
func (c *Cluster) Up() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range c.Procs {
		if c.up[p.Name] {
			out = append(out, p.Name)
		}
	}
	return out
}

// seeds lists every slot's gossip address but p's own.
func (c *Cluster) seeds(p *Proc) []string {
	var out []string
	for _, o := range c.Procs {
		if o != p {
			out = append(out, o.GossipAddr())
		}
	}
	return out
}

// Start starts the node and waits until /readyz answers; it does not mark
// it up.
func (c *Cluster) Start(ctx context.Context, p *Proc, join bool) error {
	var seeds []string
	if join {
		seeds = c.seeds(p)
	}
	if err := p.Start(c.Args, seeds); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return p.WaitReady(ctx)
}

// StartAll starts the first n slots (the first founds the cluster, the
// others join it), waits until they all see each other, and marks them up.
func (c *Cluster) StartAll(ctx context.Context, n int) error {
	for i, p := range c.Procs[:n] {
		if err := c.Start(ctx, p, i > 0); err != nil {
			return err
		}
	}
	names := make([]string, n)
	for i, p := range c.Procs[:n] {
		names[i] = p.Name
	}
	// Setup, not a promise: on a starved machine the local profile's fast
	// failure detector flaps members for a while before all see all at
	// once (20 s was too short at load 30 on 2 cores).
	if err := c.WaitMembers(ctx, names, names, 60*time.Second); err != nil {
		return err
	}
	for _, name := range names {
		c.SetUp(name, true)
	}
	return nil
}

// Members returns the alive members node via sees, sorted.
func (c *Cluster) Members(ctx context.Context, via string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := c.clients[via].Members(ctx, &pb.MembersRequest{})
	if err != nil {
		return nil, fmt.Errorf("chaos: members via %s: %w", via, err)
	}
	var out []string
	for _, m := range resp.GetMembers() {
		if m.GetState() == "alive" {
			out = append(out, m.GetName())
		}
	}
	sort.Strings(out)
	return out, nil
}

// WaitMembers polls until every node in via sees exactly want alive.
func (c *Cluster) WaitMembers(ctx context.Context, via, want []string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	w := append([]string(nil), want...)
	sort.Strings(w)
	wantS := strings.Join(w, ",")
	last := map[string]string{}
	for {
		ok := true
		for _, v := range via {
			got, err := c.Members(ctx, v)
			s := strings.Join(got, ",")
			if err != nil {
				s = err.Error()
			}
			last[v] = s
			if s != wantS {
				ok = false
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: members did not converge on [%s] within %v: %v", wantS, limit, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Owner asks node via for key's owner.
func (c *Cluster) Owner(ctx context.Context, via, key string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := c.clients[via].Owner(ctx, &pb.OwnerRequest{Key: []byte(key)})
	if err != nil {
		return "", fmt.Errorf("chaos: owner of %q via %s: %w", key, via, err)
	}
	return resp.GetOwner().GetName(), nil
}

// Owners asks node via for the owner of every key.
func (c *Cluster) Owners(ctx context.Context, via string, keys []string) (map[string]string, error) {
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		o, err := c.Owner(ctx, via, k)
		if err != nil {
			return nil, err
		}
		out[k] = o
	}
	return out, nil
}

// Close stops every node (SIGTERM, SIGKILL after 10 s) and the clients.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, p := range c.Procs {
		wg.Go(func() { p.Stop(10 * time.Second) })
	}
	wg.Wait()
	for _, conn := range c.conns {
		conn.Close()
	}
}

// Tails returns the last n lines of every node's log.
func (c *Cluster) Tails(n int) string {
	var b strings.Builder
	for _, p := range c.Procs {
		if _, err := os.Stat(p.Log); errors.Is(err, os.ErrNotExist) {
			continue
		}
		fmt.Fprintf(&b, "---- %s (%s) last %d lines ----\n%s\n", p.Name, p.Log, n, p.Tail(n))
	}
	return b.String()
}
