package rpc_test

import (
	"errors"
	"testing"
	"time"

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
