package sim

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Plan is everything a seed chooses: the cluster, the workload and the
// faults. It is drawn from its own generator, so the schedule's choices
// never shift it.
type Plan struct {
	Seed uint64
	// Nodes is the initial cluster (n1..nNodes); a join adds n(Nodes+1).
	Nodes int
	// Rates are the node clocks' rates by node index (0.99..1.01).
	Rates []float64
	// Uses and Window are every key's sliding-log limit.
	Uses   int
	Window time.Duration
	Keys   []string
	// Load is how long calls are made; the run then settles (views
	// converge, hand-offs land) for Settle.
	Load, Settle time.Duration
	// Timeout is each client call's deadline.
	Timeout     time.Duration
	Replication int
	Calls       []PlannedCall
	Faults      []Fault
	Net         NetConfig
	Member      MemberConfig
	// Partitions is the ring's partition count: the default 271, or a few
	// (17 to 31), with which bounded loads move keys between members that
	// stay, so that rings disagree about more keys on every change.
	Partitions int
}

// PlannedCall is one client call: at At, through node Node (an index;
// the next up node when it is down), for Keys (indexes: a batch).
type PlannedCall struct {
	At   time.Duration
	Node int
	Keys []int
}

// FaultKind names a fault.
type FaultKind string

// The faults a seed draws.
const (
	Crash     FaultKind = "crash"     // killed; restarted after Dur (0: never)
	Leave     FaultKind = "leave"     // graceful leave: drain, leave the gossip, exit
	Join      FaultKind = "join"      // a new node joins
	Partition FaultKind = "partition" // Group cut off both ways for Dur
	OneWay    FaultKind = "oneway"    // messages from Group to the rest lost for Dur
	Slow      FaultKind = "slow"      // Node stalls now and then, and its messages are late, for Dur
	Restart   FaultKind = "restart"   // graceful leave, back after Dur (one step of a rolling restart)
	Rolling   FaultKind = "rolling"   // every node restarted gracefully in turn, Dur apart
)

// Fault is one planned fault.
type Fault struct {
	At   time.Duration
	Kind FaultKind
	Node int   // crash, leave, slow; join: the new node's index
	Grp  []int // partition, oneway
	Dur  time.Duration
}

func (f Fault) String() string {
	s := fmt.Sprintf("%v %s", f.At, f.Kind)
	switch f.Kind {
	case Partition, OneWay, Rolling:
		s += fmt.Sprintf(" %v", names(f.Grp))
	default:
		s += " " + nodeName(f.Node)
	}
	if f.Dur > 0 {
		s += fmt.Sprintf(" for %v", f.Dur)
	}
	return s
}

func nodeName(i int) string { return fmt.Sprintf("n%d", i+1) }

func names(is []int) []string {
	out := make([]string, len(is))
	for i, x := range is {
		out[i] = nodeName(x)
	}
	return out
}

// NewPlan draws seed's plan. nodes is the initial cluster size (3..7; 0:
// the seed chooses).
func NewPlan(seed uint64, nodes int) Plan {
	g := rand.New(rand.NewPCG(seed, 0x91a4))
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(g.Int64N(int64(hi-lo)))
	}
	if nodes <= 0 {
		nodes = 3 + g.IntN(5)
	}
	p := Plan{Seed: seed, Nodes: nodes, Load: 6 * time.Second, Settle: 3 * time.Second,
		Timeout: 300 * time.Millisecond, Replication: 1}
	for range nodes + 1 {
		r := 1.0
		if g.IntN(3) > 0 {
			r = 0.99 + 0.02*g.Float64()
		}
		p.Rates = append(p.Rates, r)
	}
	p.Partitions = []int{271, 271, 31, 23, 17}[g.IntN(5)]
	p.Uses = 2 + g.IntN(4)
	p.Window = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}[g.IntN(3)]
	nk := 4 + g.IntN(9)
	for i := range nk {
		p.Keys = append(p.Keys, fmt.Sprintf("k%d", i))
	}
	p.Net = NetConfig{Delay: 200 * time.Microsecond, Jitter: between(100*time.Microsecond, 3*time.Millisecond)}
	if g.IntN(2) == 0 {
		p.Net.Drop = 0.02 * g.Float64()
		p.Net.Reset = 0.01 * g.Float64()
		p.Net.Dup = 0.03 * g.Float64()
		p.Net.Long, p.Net.LongMax = 0.1*g.Float64(), between(10*time.Millisecond, 300*time.Millisecond)
	}
	p.Member = MemberConfig{
		DetectMin: between(300*time.Millisecond, 800*time.Millisecond), DetectMax: between(900*time.Millisecond, 2500*time.Millisecond),
		LearnMin: between(10*time.Millisecond, 100*time.Millisecond), LearnMax: between(150*time.Millisecond, 1200*time.Millisecond),
		ProbeMin: 50 * time.Millisecond, ProbeMax: 300 * time.Millisecond,
	}
	// Calls: each key at about 3 times its limit, through random nodes;
	// one call in 8 a batch of two keys.
	perKey := 3 * float64(p.Uses) / p.Window.Seconds() // calls per second
	total := int(perKey * p.Load.Seconds() * float64(nk))
	for range total {
		c := PlannedCall{At: between(0, p.Load), Node: g.IntN(nodes + 1), Keys: []int{g.IntN(nk)}}
		if g.IntN(8) == 0 {
			if k := g.IntN(nk); k != c.Keys[0] {
				c.Keys = append(c.Keys, k)
			}
		}
		p.Calls = append(p.Calls, c)
	}
	// A hot key or two: 40 calls a second, so that calls meet keys in
	// motion (hops, hand-offs under way) while rings disagree.
	for h := range 1 + g.IntN(2) {
		for range int(40 * p.Load.Seconds()) {
			p.Calls = append(p.Calls, PlannedCall{At: between(0, p.Load), Node: g.IntN(nodes + 1), Keys: []int{h % nk}})
		}
	}
	// Faults: one after another, from 0.5s into the load.
	up := make([]bool, nodes+1)
	for i := range nodes {
		up[i] = true
	}
	countUp := func() int {
		n := 0
		for _, u := range up {
			if u {
				n++
			}
		}
		return n
	}
	pickUp := func() int {
		var c []int
		for i, u := range up {
			if u {
				c = append(c, i)
			}
		}
		return c[g.IntN(len(c))]
	}
	at := between(300*time.Millisecond, time.Second)
	joined := false
	for n := g.IntN(4); n > 0 && at < p.Load-500*time.Millisecond; n-- {
		f := Fault{At: at, Dur: between(300*time.Millisecond, 2500*time.Millisecond)}
		kinds := []FaultKind{Crash, Partition, OneWay, Slow, Restart, Rolling}
		if countUp() > 3 {
			kinds = append(kinds, Leave)
		}
		if !joined && nodes < 7 { // never more than 7 cores
			kinds = append(kinds, Join)
		}
		f.Kind = kinds[g.IntN(len(kinds))]
		switch f.Kind {
		case Crash:
			f.Node = pickUp()
			if g.IntN(4) == 0 && countUp() > 3 {
				f.Dur = 0 // stays down
				up[f.Node] = false
			}
		case Leave:
			f.Node = pickUp()
			f.Dur = 0
			up[f.Node] = false
		case Join:
			f.Node = nodes
			f.Dur = 0
			up[nodes] = true
			joined = true
		case Slow, Restart:
			f.Node = pickUp()
		case Rolling:
			for i, u := range up {
				if u {
					f.Grp = append(f.Grp, i)
				}
			}
			f.Dur = between(200*time.Millisecond, 700*time.Millisecond)
		case Partition, OneWay:
			// A minority: one node, or two of five or more.
			k := 1
			if countUp() >= 5 && g.IntN(2) == 0 {
				k = 2
			}
			for len(f.Grp) < k {
				x := pickUp()
				if !containsInt(f.Grp, x) {
					f.Grp = append(f.Grp, x)
				}
			}
		}
		p.Faults = append(p.Faults, f)
		busy := f.Dur
		if f.Kind == Rolling {
			busy = f.Dur * time.Duration(len(f.Grp)+1)
		}
		at += busy + between(200*time.Millisecond, 1500*time.Millisecond)
	}
	return p
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
