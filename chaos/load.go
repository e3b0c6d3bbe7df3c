package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
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

// fallbackHeader is ringlimit.FallbackHeader: a node sets it on a verdict
// its failure policy decided.
const fallbackHeader = "ringlimit-fallback"

// consume sends one call and records it.
func (c *Cluster) consume(node, key string, lc *LoadConfig, h *History) Call {
	ctx, cancel := context.WithTimeout(context.Background(), lc.Deadline)
	defer cancel()
	req := &pb.ConsumeRequest{Entries: []*pb.Entry{{
		Key:   []byte(key),
		Limit: &pb.Limit{Algorithm: pb.Algorithm_SLIDING_LOG, Uses: int64(lc.Uses), WindowMs: lc.Window.Milliseconds()},
		Cost:  1,
	}}}
	var md metadata.MD
	start := h.Now()
	resp, err := c.clients[node].Consume(ctx, req, grpc.Header(&md))
	call := Call{Key: key, Node: node, Start: start, End: h.Now()}
	if err != nil {
		st, _ := status.FromError(err)
		call.Err, call.Msg = st.Code().String(), st.Message()
	} else {
		call.Answered, call.Allowed = true, resp.GetVerdict().GetAllowed()
		if p := md.Get(fallbackHeader); len(p) > 0 {
			call.Fallback = p[0]
		}
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

// probeRounds is how many times Probe asks again about a key whose round
// met the failure policy.
const probeRounds = 3

// Probe waits until no use can be left in any window, then sends uses+1
// sequential calls per key, spread over the usable nodes. A verdict the
// failure policy decided (the node's owner did not answer in time, as on a
// starved machine), or no verdict within the deadline, says nothing about
// the cluster's count: a key whose round had one is probed again, after
// another window, up to probeRounds rounds. It returns each key's last
// round.
func (c *Cluster) Probe(ctx context.Context, keys []string, lc LoadConfig) ([]Call, error) {
	var out []Call
	for round := 0; round < probeRounds && len(keys) > 0; round++ {
		calls, err := c.probeRound(ctx, keys, lc)
		if err != nil {
			return nil, err
		}
		fellBack := map[string]bool{}
		for _, call := range calls {
			if undecided(call) {
				fellBack[call.Key] = true
			}
		}
		var again []string
		for _, k := range keys {
			if fellBack[k] && round+1 < probeRounds {
				again = append(again, k)
			}
		}
		for _, call := range calls {
			if !fellBack[call.Key] || round+1 == probeRounds {
				out = append(out, call)
			}
		}
		keys = again
	}
	return out, nil
}

// undecided reports whether a probe call says nothing about the count.
func undecided(c Call) bool {
	return c.Fallback != "" || (!c.Answered && (c.Err == "DeadlineExceeded" || c.Err == "Canceled"))
}

// probeRound is one round of Probe.
func (c *Cluster) probeRound(ctx context.Context, keys []string, lc LoadConfig) ([]Call, error) {
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
