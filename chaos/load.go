package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// LoadConfig shapes the load.
type LoadConfig struct {
	// Workers is the number of concurrent clients; worker w prefers node
	// w mod nodes and moves to the next usable node while that one is down.
	Workers int
	// Pace is each worker's pause between calls.
	Pace time.Duration
	// Hot and Cold are the keys; a call picks a hot key with probability
	// HotShare, else a cold one, uniformly.
	Hot, Cold []string
	HotShare  float64
	// Uses and Window: the sliding-log limit of every call.
	Uses   int
	Window time.Duration
	// Deadline of every call (the node's Timeout + 100 ms).
	Deadline time.Duration
	// Seed makes key choices repeatable.
	Seed uint64
}

// consume sends one call and records it.
func (c *Cluster) consume(node, key string, lc *LoadConfig, h *History) Call {
	ctx, cancel := context.WithTimeout(context.Background(), lc.Deadline)
	defer cancel()
	req := &pb.ConsumeRequest{Entries: []*pb.Entry{{
		Key:   []byte(key),
		Limit: &pb.Limit{Algorithm: pb.Algorithm_SLIDING_LOG, Uses: int64(lc.Uses), WindowMs: lc.Window.Milliseconds()},
		Cost:  1,
	}}}
	start := h.Now()
	resp, err := c.clients[node].Consume(ctx, req)
	call := Call{Key: key, Node: node, Start: start, End: h.Now()}
	if err != nil {
		st, _ := status.FromError(err)
		call.Err, call.Msg = st.Code().String(), st.Message()
	} else {
		call.Answered, call.Allowed = true, resp.GetVerdict().GetAllowed()
	}
	h.Add(call)
	return call
}

// RunLoad starts the workers; the returned stop ends them and waits (each
// finishes its call in flight, bounded by the deadline).
func (c *Cluster) RunLoad(lc LoadConfig, h *History) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range lc.Workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(lc.Seed, uint64(w)))
			t := time.NewTimer(0)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
				}
				if node := c.pick(w); node != "" {
					key := lc.Cold[rng.IntN(len(lc.Cold))]
					if rng.Float64() < lc.HotShare {
						key = lc.Hot[rng.IntN(len(lc.Hot))]
					}
					c.consume(node, key, &lc, h)
				}
				t.Reset(lc.Pace)
			}
		})
	}
	return func() { close(done); wg.Wait() }
}

// pick chooses worker w's node: its own slot, or the next usable one.
func (c *Cluster) pick(w int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.Procs)
	for i := range n {
		p := c.Procs[(w+i)%n]
		if c.up[p.Name] {
			return p.Name
		}
	}
	return ""
}

// Probe waits until no use can be left in any window, then sends uses+1
// sequential calls for each key, spread round-robin over the usable
// nodes, all keys at once, and returns those calls.
func (c *Cluster) Probe(ctx context.Context, keys []string, lc LoadConfig) ([]Call, error) {
	nodes := c.Up()
	if len(nodes) == 0 {
		return nil, fmt.Errorf("chaos: probe: no usable node")
	}
	select {
	case <-time.After(lc.Window + 300*time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	h := NewHistory(time.Now())
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			for j := range lc.Uses + 1 {
				c.consume(nodes[(i+j)%len(nodes)], k, &lc, h)
			}
		})
	}
	wg.Wait()
	return h.Calls(), nil
}
