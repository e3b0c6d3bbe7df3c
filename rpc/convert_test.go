package rpc_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// A fixed-window limit crosses the wire whole: its calendar and zone reach
// the owner, so the owner ends its windows where the caller asked.
func TestFixedWindowLimitRoundTrip(t *testing.T) {
	paris, err := limiter.LoadZone("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []limiter.Limit{
		{Algorithm: limiter.FixedWindow, Uses: 100, Window: time.Hour},
		limiter.CalendarLimit(5, limiter.CalendarMonth, nil),
		limiter.CalendarLimit(5, limiter.CalendarDay, paris),
		limiter.CalendarLimit(5, limiter.CalendarYear, paris),
	} {
		if got := rpc.LimitFromPB(rpc.LimitToPB(l)); got != l {
			t.Errorf("LimitToPB/FromPB(%v) = %+v, want %+v", l, got, l)
		}
		es := rpc.EntriesFromPB(rpc.EntriesToPB([]limiter.Entry{{Key: "k", Limit: l}}))
		if es[0].Limit != l {
			t.Errorf("EntriesToPB/FromPB(%v) = %+v, want %+v", l, es[0].Limit, l)
		}
	}
	// An unknown zone from the wire is refused, naming the field.
	l := rpc.LimitFromPB(&pb.Limit{Algorithm: pb.Algorithm_FIXED_WINDOW, Uses: 1, WindowMs: 86400000, Calendar: pb.Calendar_CALENDAR_DAY, Zone: "Mars/Olympus"})
	var ie *limiter.InputError
	if err := l.Validate(); !errors.As(err, &ie) || ie.Field != "zone" {
		t.Fatalf("a limit in an unknown zone: Validate = %v, want an *InputError on \"zone\"", err)
	}
}

// A fixed-window counter's state travels as its window's end (an age)
// and its count.
func TestFixedWindowStateRoundTrip(t *testing.T) {
	in := []limiter.CounterState{{Key: "k", Algorithm: limiter.FixedWindow, Window: time.Minute, Fixed: limiter.FixedState{End: 12_345_678, Count: 7}}}
	out := rpc.StatesFromPB(rpc.StatesToPB(in))
	if len(out) != 1 || out[0].Fixed != in[0].Fixed || out[0].Algorithm != limiter.FixedWindow || out[0].Bucket != (limiter.BucketState{}) {
		t.Fatalf("StatesToPB/FromPB = %+v, want %+v", out, in)
	}
}

// A window_ms no Duration holds is refused with the value sent; those a
// Duration holds convert exactly, so Validate names them as sent too.
func TestCheckWindows(t *testing.T) {
	const largest = 9223372036854
	entries := func(ms ...int64) []*pb.Entry {
		var es []*pb.Entry
		for _, w := range ms {
			es = append(es, &pb.Entry{Key: []byte("k"), Limit: &pb.Limit{Uses: 1, WindowMs: w}})
		}
		return es
	}
	for _, ms := range []int64{1, 1000, largest, 0, -5, -largest} {
		if err := rpc.CheckWindows(entries(1000, ms)); err != nil {
			t.Errorf("CheckWindows(%d): %v, want nil (a Duration holds it)", ms, err)
		}
	}
	for _, c := range []struct {
		ms   int64
		want string
	}{
		{largest + 1, "entries[1].limit.window: must be from 1ms to 9223372036854ms, got 9223372036855ms"},
		{math.MaxInt64, "got 9223372036854775807ms"},
		{-largest - 1, "got -9223372036855ms"},
		{math.MinInt64, "got -9223372036854775808ms"},
	} {
		err := rpc.CheckWindows(entries(1000, c.ms))
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != "entries[1].limit.window" || !errors.Is(err, limiter.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckWindows(%d): %v, want an input error with %q", c.ms, err, c.want)
		}
	}
	// Negative windows convert exactly (they were saturated to -1ns).
	if err := rpc.LimitFromPB(&pb.Limit{Uses: 1, WindowMs: -5}).Validate(); err == nil || !strings.Contains(err.Error(), "got -5ms") {
		t.Errorf("a window_ms of -5: %v, want one naming -5ms", err)
	}
	if l := rpc.LimitFromPB(&pb.Limit{Uses: 1, WindowMs: largest}); l.Window != limiter.MaxWindow || l.Validate() != nil {
		t.Errorf("the largest window_ms: %v %v", l.Window, l.Validate())
	}
}

// ErrShuttingDown crosses the wire as a reason, in a call's error and in
// an RPC's status, and only the reason makes it match: a message that
// merely reads like it (an error text from elsewhere) does not.
func TestShuttingDownTravelsAsReason(t *testing.T) {
	err := fmt.Errorf("draining: %w", rpc.ErrShuttingDown)
	if got := rpc.ErrorFromPB(rpc.ErrorToPB(err)); !errors.Is(got, rpc.ErrShuttingDown) || !errors.Is(got, rpc.ErrUnavailable) {
		t.Errorf("call error round trip: %v; want ErrShuttingDown within ErrUnavailable", got)
	}
	if got := rpc.FromStatus(rpc.ToStatus(err)); !errors.Is(got, rpc.ErrShuttingDown) || !errors.Is(got, rpc.ErrUnavailable) {
		t.Errorf("status round trip: %v; want ErrShuttingDown within ErrUnavailable", got)
	}
	lookalike := &pb.Error{Code: uint32(codes.Unavailable), Message: rpc.ErrShuttingDown.Error()}
	if got := rpc.ErrorFromPB(lookalike); errors.Is(got, rpc.ErrShuttingDown) || !errors.Is(got, rpc.ErrUnavailable) {
		t.Errorf("a message naming shutdown without the reason: %v; want only ErrUnavailable", got)
	}
	if got := rpc.FromStatus(status.Error(codes.Unavailable, rpc.ErrShuttingDown.Error())); errors.Is(got, rpc.ErrShuttingDown) {
		t.Errorf("a status naming shutdown without the reason: %v; want only ErrUnavailable", got)
	}
}

// A limit's name travels from a client to the node it calls, not between
// peers; a shadowed verdict stays shadowed.
func TestNamesAndShadowed(t *testing.T) {
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 10, Window: time.Second, Name: "POST /login"}
	es := []limiter.Entry{{Key: "k", Limit: l, Cost: 2}}
	if got := rpc.EntriesFromPB(rpc.ClientEntriesToPB(es)); got[0] != es[0] {
		t.Errorf("ClientEntriesToPB/FromPB = %+v, want %+v", got[0], es[0])
	}
	if got := rpc.EntriesFromPB(rpc.EntriesToPB(es)); got[0].Limit.Name != "" {
		t.Errorf("EntriesToPB (peers) carried the name %q", got[0].Limit.Name)
	}
	v := limiter.Verdict{Allowed: true, Shadowed: true, RetryAfter: time.Second, RetryAt: time.UnixMilli(1_700_000_000_000)}
	if got := rpc.VerdictFromPB(rpc.VerdictToPB(v)); !got.Shadowed || !got.Allowed || got.RetryAfter != v.RetryAfter || !got.RetryAt.Equal(v.RetryAt) {
		t.Errorf("VerdictToPB/FromPB = %+v, want %+v", got, v)
	}
}

// A token bucket's burst and a debit cross the wire: the owner's engine
// (a limiter.Memory) counts the bucket's capacity and records the debit.
func TestBurstAndDebitRoundTrip(t *testing.T) {
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 100, Window: time.Second, Burst: 500}
	if got := rpc.LimitFromPB(rpc.LimitToPB(l)); got != l {
		t.Errorf("LimitToPB/FromPB(%v) = %+v, want %+v", l, got, l)
	}
	in := []limiter.Entry{{Key: "a", Limit: l, Cost: 7, Debit: true}, {Key: "b", Limit: l, Cost: 1000, Debit: true}}
	out := rpc.EntriesFromPB(rpc.EntriesToPB(in))
	for i := range in {
		if out[i] != in[i] {
			t.Errorf("EntriesToPB/FromPB entry %d = %+v, want %+v", i, out[i], in[i])
		}
	}
}

// A token bucket's holds (its tokens out on leases) cross the wire with
// its state: a replica or a new owner without them would let the bucket
// refill while holders still spend.
func TestBucketHoldsRoundTrip(t *testing.T) {
	in := []limiter.CounterState{{Key: "k", Algorithm: limiter.TokenBucket, Window: time.Second,
		Bucket: limiter.BucketState{TAT: 500_000, Rem: 3, Uses: 10},
		Holds:  []limiter.BucketHold{{ID: 7, K: 4, Expiry: 210_000}, {ID: 9, K: 1, Expiry: 20_000}}}}
	out := rpc.StatesFromPB(rpc.StatesToPB(in))
	if len(out) != 1 || out[0].Bucket != in[0].Bucket || !slices.Equal(out[0].Holds, in[0].Holds) {
		t.Fatalf("StatesToPB/FromPB = %+v, want %+v", out, in)
	}
	if err := limiter.CheckState(&out[0], limiter.Bounds{}); err != nil {
		t.Fatalf("CheckState: %v", err)
	}
	bad := out[0]
	bad.Holds = []limiter.BucketHold{{ID: 0, K: 1}}
	if err := limiter.CheckState(&bad, limiter.Bounds{}); err == nil {
		t.Fatal("CheckState took a hold with id 0")
	}
}

// A token bucket's moves record crosses the wire with its state, and a
// receipt's stamp with the receipt (unconverted: neither is a time), so a
// new owner or a replica keeps what its receipts subtract.
func TestBucketMovesRoundTrip(t *testing.T) {
	in := []limiter.CounterState{{Key: "k", Algorithm: limiter.TokenBucket, Window: time.Second,
		Bucket: limiter.BucketState{TAT: -2_000, Uses: 10},
		Moves:  limiter.BucketMoves{Inc: math.MaxUint64 - 5, Moved: 300_000, Until: 150_000}}}
	out := rpc.StatesFromPB(rpc.StatesToPB(in))
	if len(out) != 1 || out[0].Bucket != in[0].Bucket || out[0].Moves != in[0].Moves {
		t.Fatalf("StatesToPB/FromPB = %+v, want %+v", out, in)
	}
	if err := limiter.CheckState(&out[0], limiter.Bounds{}); err != nil {
		t.Fatalf("CheckState: %v", err)
	}
	// Another algorithm's state carries no record, whatever the message says.
	pbs := rpc.StatesToPB([]limiter.CounterState{{Key: "k", Algorithm: limiter.SlidingWindow, Window: time.Second}})
	pbs[0].MoveInc, pbs[0].MovedUs = 3, 4
	if got := rpc.StatesFromPB(pbs); got[0].Moves != (limiter.BucketMoves{}) {
		t.Fatalf("a sliding window's state came back with moves %+v", got[0].Moves)
	}
	rs := []limiter.Receipt{{Key: "k", Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 10, Window: time.Second},
		Cost: 2, At: 1_000, After: 9_000, MoveInc: 77, Moved: 12_345}}
	back := rpc.ReceiptsFromPB(rpc.ReceiptsToPB(rs, "a", 1_000), "b", 50_000, 0)
	if len(back) != 1 || back[0].MoveInc != 77 || back[0].Moved != 12_345 || back[0].After != 58_000 {
		t.Fatalf("receipt round trip = %+v; want the stamp (77, 12345) unchanged and After 58000", back)
	}
}

// A lean receipt (no limit) takes its key and limit from the call's entry
// at its index; a whole one keeps its own.
func TestCompleteReceipts(t *testing.T) {
	lim := &pb.Limit{Uses: 5, WindowMs: 1000}
	call := &pb.Call{Entries: []*pb.Entry{{Key: []byte("a"), Limit: lim}, {Key: []byte("b"), Limit: lim}}}
	own := &pb.Limit{Uses: 7, WindowMs: 2000}
	rs := []*pb.Receipt{{Id: 1}, {Id: 2, Key: []byte("x"), Limit: own}}
	rpc.CompleteReceipts(rs, call)
	if string(rs[0].Key) != "a" || rs[0].Limit != lim {
		t.Errorf("lean receipt completed as %q %v; want the entry's a %v", rs[0].Key, rs[0].Limit, lim)
	}
	if string(rs[1].Key) != "x" || rs[1].Limit != own {
		t.Errorf("whole receipt changed to %q %v; want its own x %v", rs[1].Key, rs[1].Limit, own)
	}
}

// CallToPB carries a call's entries as EntriesToPB does, for one entry
// (its messages in one allocation) and for several.
func TestCallToPB(t *testing.T) {
	paris, err := limiter.LoadZone("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	one := []limiter.Entry{{Key: "k", Limit: limiter.CalendarLimit(5, limiter.CalendarDay, paris), Cost: 2}}
	two := []limiter.Entry{{Key: "a", Limit: limiter.Limit{Uses: 3, Window: time.Second}, Debit: true}, {Key: "b", Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 9, Window: time.Minute, Burst: 4}, Debit: true}}
	for _, es := range [][]limiter.Entry{one, two} {
		got := rpc.EntriesFromPB(rpc.CallToPB(es).GetEntries())
		if len(got) != len(es) {
			t.Fatalf("CallToPB(%v): %d entries back", es, len(got))
		}
		for i := range es {
			if got[i] != es[i] {
				t.Errorf("CallToPB entry %d = %+v, want %+v", i, got[i], es[i])
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { rpc.CallToPB(one) }); n > 2 {
		t.Errorf("CallToPB of one entry: %v allocations, want 2 (the messages, the key)", n)
	}
}
