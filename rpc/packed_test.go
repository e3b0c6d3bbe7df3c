package rpc_test

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// randomStates is a batch as replication ships it: logs (some empty, some
// deltas, now and then a use ahead of the sender's clock) among the other
// algorithms' states.
func randomStates(rng *rand.Rand) []limiter.CounterState {
	algs := []limiter.Algorithm{limiter.SlidingLog, limiter.Concurrency, limiter.SlidingWindow, limiter.TokenBucket, limiter.FixedWindow}
	out := make([]limiter.CounterState, rng.IntN(40))
	for i := range out {
		c := limiter.CounterState{Key: "k" + strconv.Itoa(i), Algorithm: algs[rng.IntN(len(algs))], Window: time.Duration(1+rng.IntN(5000)) * time.Millisecond}
		switch c.Algorithm {
		case limiter.SlidingLog, limiter.Concurrency:
			c.Delta = rng.IntN(2) == 0
			for range rng.IntN(12) {
				at := -rng.Int64N(int64(c.Window / time.Microsecond))
				if rng.IntN(20) == 0 {
					at = rng.Int64N(1000) + 1 // ahead: travels unpacked
				}
				c.Log = append(c.Log, limiter.LogUse{At: at, Cost: 1 + rng.Int64N(3), ID: rng.Uint64()})
			}
		case limiter.SlidingWindow:
			c.Counts = limiter.WindowState{Start: -rng.Int64N(1e6), Curr: rng.Int64N(100), Prev: rng.Int64N(100)}
		case limiter.TokenBucket:
			c.Bucket = limiter.BucketState{TAT: rng.Int64N(1e6), Rem: rng.Int64N(1000), Uses: 1 + rng.Int64N(100)}
			if rng.IntN(2) == 0 { // the moves record travels too (a release's bound)
				c.Moves = limiter.BucketMoves{Inc: 1 + rng.Uint64N(1<<40), Moved: rng.Int64N(1e6), Until: rng.Int64N(1e6)}
			}
		case limiter.FixedWindow:
			c.Fixed = limiter.FixedState{End: rng.Int64N(1e6), Count: rng.Int64N(100)}
		}
		out[i] = c
	}
	return out
}

// wire marshals and unmarshals req, as the receiver reads it.
func wire(t testing.TB, req *pb.StateRequest) *pb.StateRequest {
	t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	out := &pb.StateRequest{}
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameStates compares two conversions, an empty log equal to none.
func sameStates(a, b []limiter.CounterState) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if len(x.Log) == 0 && len(y.Log) == 0 {
			x.Log, y.Log = nil, nil
		}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// The packed path reads back exactly what the unpacked one does, and
// what was exported.
func TestPackedRoundTrip(t *testing.T) {
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 1))
		in := randomStates(rng)
		states, packed := rpc.PackStates(in)
		got, err := rpc.StatesFromRequest(wire(t, &pb.StateRequest{States: states, PackedLogs: packed}))
		if err != nil {
			t.Fatalf("seed %d: StatesFromRequest: %v", seed, err)
		}
		want := rpc.StatesFromPB(wire(t, &pb.StateRequest{States: rpc.StatesToPB(in)}).GetStates())
		if !sameStates(got, want) {
			t.Fatalf("seed %d: packed path = %+v\nunpacked path = %+v", seed, got, want)
		}
		if !sameStates(got, in) {
			t.Fatalf("seed %d: packed round trip = %+v, want %+v", seed, got, in)
		}
		for i, s := range states {
			if packed.GetCounts()[i] > 0 && len(s.GetLog()) > 0 {
				t.Fatalf("seed %d: state %d has a packed and an unpacked log", seed, i)
			}
		}
	}
}

// A packed batch is smaller on the wire than the same batch unpacked (a
// LogUse message per use is what packing saves).
func TestPackedSmaller(t *testing.T) {
	in := []limiter.CounterState{{Key: "k", Algorithm: limiter.SlidingLog, Window: time.Second}}
	for i := range 100 {
		in[0].Log = append(in[0].Log, limiter.LogUse{At: -int64(1000 * i), Cost: 1, ID: uint64(i + 1)})
	}
	states, packed := rpc.PackStates(in)
	p, _ := proto.Marshal(&pb.StateRequest{States: states, PackedLogs: packed})
	u, _ := proto.Marshal(&pb.StateRequest{States: rpc.StatesToPB(in)})
	if len(p) >= len(u) {
		t.Fatalf("packed %d bytes, unpacked %d", len(p), len(u))
	}
}

func TestCheckPackedRejects(t *testing.T) {
	log := []*pb.LogUse{{AgeUs: 1, Cost: 1, Id: 1}}
	st := func(l []*pb.LogUse) []*pb.CounterState {
		return []*pb.CounterState{{Key: []byte("a"), Algorithm: pb.Algorithm(limiter.SlidingLog), WindowMs: 1000, Log: l}, {Key: []byte("b"), Algorithm: pb.Algorithm(limiter.SlidingLog), WindowMs: 1000}}
	}
	ok := func() *pb.PackedLogs {
		return &pb.PackedLogs{Counts: []uint32{1, 2}, AgesUs: []int64{5, 4, 3}, Costs: []int64{1, 1, 2}, Ids: []uint64{1, 2, 3}}
	}
	for _, tc := range []struct {
		name, field string
		edit        func(*pb.StateRequest)
	}{
		{"too few counts", "packed_logs.counts", func(r *pb.StateRequest) { r.PackedLogs.Counts = []uint32{3} }},
		{"too many counts", "packed_logs.counts", func(r *pb.StateRequest) { r.PackedLogs.Counts = []uint32{1, 1, 1} }},
		{"counts above the columns", "packed_logs.ages_us", func(r *pb.StateRequest) { r.PackedLogs.Counts = []uint32{2, 2} }},
		{"counts below the columns", "packed_logs.ages_us", func(r *pb.StateRequest) { r.PackedLogs.Counts = []uint32{1, 1} }},
		{"a count that wraps", "packed_logs.ages_us", func(r *pb.StateRequest) { r.PackedLogs.Counts = []uint32{1, 1<<32 - 1} }},
		{"short costs", "packed_logs.costs", func(r *pb.StateRequest) { r.PackedLogs.Costs = r.PackedLogs.Costs[:2] }},
		{"short ids", "packed_logs.ids", func(r *pb.StateRequest) { r.PackedLogs.Ids = nil }},
		{"log and count", "states[0].log", func(r *pb.StateRequest) { r.States = st(log) }},
		{"negative age", "packed_logs.ages_us[1]", func(r *pb.StateRequest) { r.PackedLogs.AgesUs[1] = -7 }},
		{"zero cost", "packed_logs.costs[2]", func(r *pb.StateRequest) { r.PackedLogs.Costs[2] = 0 }},
	} {
		req := &pb.StateRequest{States: st(nil), PackedLogs: ok()}
		if err := rpc.CheckPacked(req); err != nil {
			t.Fatalf("%s: the good request: %v", tc.name, err)
		}
		tc.edit(req)
		err := rpc.CheckPacked(req)
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field || !errors.Is(err, limiter.ErrInvalid) {
			t.Errorf("%s: CheckPacked = %v, want an InputError naming %s", tc.name, err, tc.field)
		}
		if _, err2 := rpc.StatesFromRequest(req); err2 == nil {
			t.Errorf("%s: StatesFromRequest took it", tc.name)
		}
	}
}

// Whatever arrives, reading it does not panic.
func FuzzStatesFromRequest(f *testing.F) {
	for seed := range uint64(8) {
		states, packed := rpc.PackStates(randomStates(rand.New(rand.NewPCG(seed, 2))))
		b, _ := proto.Marshal(&pb.StateRequest{States: states, PackedLogs: packed})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &pb.StateRequest{}
		if proto.Unmarshal(b, req) != nil {
			return
		}
		out, err := rpc.StatesFromRequest(req)
		if err == nil && req.GetPackedLogs() != nil {
			n := 0
			for _, c := range out {
				n += len(c.Log)
			}
			if n > len(req.GetPackedLogs().GetAgesUs())+countLogs(req) {
				t.Fatalf("%d uses out of %d", n, len(req.GetPackedLogs().GetAgesUs()))
			}
		}
	})
}

func countLogs(req *pb.StateRequest) int {
	n := 0
	for _, s := range req.GetStates() {
		n += len(s.GetLog())
	}
	return n
}

// One Packer serves shipment after shipment (rpc/peer keeps them in a
// pool): each reads back exactly what was exported, with nothing of an
// earlier, larger one left in it (keys of other lengths, logs that went
// unpacked, counts of states no longer there).
func TestPackerReuse(t *testing.T) {
	var pk rpc.Packer
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 3))
		in := randomStates(rng)
		for i := range in {
			in[i].Key = strings.Repeat("k", 1+rng.IntN(40)) + strconv.Itoa(i)
		}
		states, packed := pk.Pack(in)
		got, err := rpc.StatesFromRequest(wire(t, &pb.StateRequest{States: states, PackedLogs: packed}))
		if err != nil {
			t.Fatalf("seed %d: StatesFromRequest: %v", seed, err)
		}
		if !sameStates(got, in) {
			t.Fatalf("seed %d: through a reused Packer = %+v, want %+v", seed, got, in)
		}
	}
}
