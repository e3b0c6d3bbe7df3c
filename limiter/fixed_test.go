package limiter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

func TestParseFixedWindow(t *testing.T) {
	paris, err := limiter.LoadZone("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in   string
		want limiter.Limit
		back string // String(), when it differs from in
	}{
		{"fixed-window:100/1h", limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 100, Window: time.Hour}, ""},
		{"fixed-window:5/1d", limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 5, Window: 24 * time.Hour}, ""},
		{"fixed-window:5/1d@UTC", limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 5, Window: 24 * time.Hour}, "fixed-window:5/1d"},
		{"fixed-window:1000/1mo", limiter.CalendarLimit(1000, limiter.CalendarMonth, nil), ""},
		{"fixed-window:1000/1mo@UTC", limiter.CalendarLimit(1000, limiter.CalendarMonth, nil), "fixed-window:1000/1mo"},
		{"fixed-window:7/1y", limiter.CalendarLimit(7, limiter.CalendarYear, nil), ""},
		{"fixed-window:50/1d@Europe/Paris", limiter.CalendarLimit(50, limiter.CalendarDay, paris), ""},
		{"fixed-window:50/1mo@Europe/Paris", limiter.CalendarLimit(50, limiter.CalendarMonth, paris), ""},
		{"fixed-window:50/1y@Europe/Paris", limiter.CalendarLimit(50, limiter.CalendarYear, paris), ""},
	} {
		got, err := limiter.ParseLimit(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		if err := got.Validate(); err != nil {
			t.Errorf("ParseLimit(%q) gave a limit Validate refuses: %v", c.in, err)
		}
		back := c.back
		if back == "" {
			back = c.in
		}
		if s := got.String(); s != back {
			t.Errorf("ParseLimit(%q).String() = %q, want %q", c.in, s, back)
		}
	}
	for _, c := range []struct{ in, field string }{
		{"100/1mo", "calendar"},               // a calendar window needs fixed-window
		{"sliding-window:100/1y", "calendar"}, // the same
		{"token-bucket:1/1d@Europe/Paris", "calendar"},
		{"fixed-window:100/2mo", "calendar"}, // one unit only
		{"fixed-window:100/1.5y", "calendar"},
		{"fixed-window:100/mo", "calendar"},
		{"fixed-window:100/1h@Europe/Paris", "zone"}, // only calendar units take a zone
		{"fixed-window:100/15m@UTC", "zone"},
		{"fixed-window:100/1mo@", "zone"},
		{"fixed-window:100/1mo@Mars/Olympus", "zone"},
		{"fixed-window:100/1d@Local", "zone"},
		{"fixed-window:100/1d@Europe/Paris ", "zone"},
		{"fixed-windows:100/1h", "algorithm"},
		{"fixed-window:0/1h", "uses"},
		{"fixed-window:100/0s", "window"},
		{"fixed-window:100", "limit"},
	} {
		_, err := limiter.ParseLimit(c.in)
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != c.field || !errors.Is(err, limiter.ErrInvalid) {
			t.Errorf("ParseLimit(%q) = %v; want an *InputError on %q", c.in, err, c.field)
		}
	}
}

func TestValidateCalendar(t *testing.T) {
	paris, _ := limiter.LoadZone("Europe/Paris")
	for _, c := range []struct {
		name  string
		l     limiter.Limit
		field string
	}{
		{"calendar on a sliding window", limiter.Limit{Algorithm: limiter.SlidingWindow, Uses: 1, Window: 24 * time.Hour, Calendar: limiter.CalendarDay, Zone: paris}, "calendar"},
		{"unknown calendar", limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 1, Window: time.Hour, Calendar: 9}, "calendar"},
		{"month of 31 days", limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 1, Window: 31 * 24 * time.Hour, Calendar: limiter.CalendarMonth}, "window"},
		{"zone without a calendar", limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 1, Window: time.Hour, Zone: paris}, "zone"},
		{"Local zone", limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 1, Window: 24 * time.Hour, Calendar: limiter.CalendarDay, Zone: time.Local}, "zone"},
	} {
		err := c.l.Validate()
		var ie *limiter.InputError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("%s: Validate = %v; want an *InputError on %q", c.name, err, c.field)
		}
	}
	if err := limiter.CalendarLimit(1, limiter.CalendarYear, paris).Validate(); err != nil {
		t.Errorf("a calendar year in Paris: %v", err)
	}
}

// A fixed-window counter handed over as ages keeps its count and its
// window's end on the receiving store's clock, whatever that clock reads;
// the next window aligns to the receiver's own clock. A receipt releases
// exactly its use, once.
func TestFixedWindowHandOff(t *testing.T) {
	const hour = int64(time.Hour / time.Microsecond)
	base := time.UnixMicro(1_700_000_000 / 3600 * 3600 * 1_000_000) // a whole hour
	l := limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 3, Window: time.Hour}
	e := []limiter.Entry{{Key: "k", Limit: l}}
	fromClock := limiter.NewFakeClock(base.Add(40 * time.Minute))
	from := limiter.NewMemory(limiter.MemoryConfig{Clock: fromClock, SweepInterval: -1})
	defer from.Close()
	for range 2 {
		if v, err := from.ConsumeMany(t.Context(), e); err != nil || !v.Allowed {
			t.Fatalf("consume: %+v, %v", v, err)
		}
	}
	st, ok := from.TakeCounter("k", limiter.FixedWindow, time.Hour)
	if !ok || st.Fixed.Count != 2 || st.Fixed.End != 20*60*1_000_000 {
		t.Fatalf("exported %+v, %v; want count 2, end 20 minutes ahead", st, ok)
	}
	// The receiver's clock reads 5 s more at the same instant.
	toClock := limiter.NewFakeClock(base.Add(40*time.Minute + 5*time.Second))
	to := limiter.NewMemory(limiter.MemoryConfig{Clock: toClock, SweepInterval: -1})
	defer to.Close()
	to.Import([]limiter.CounterState{st})
	to.Import([]limiter.CounterState{st}) // twice changes nothing
	v, err := to.ConsumeMany(limiter.WithRelease(t.Context()), e)
	if err != nil || !v.Allowed || v.Remaining != 0 {
		t.Fatalf("after the hand-off: %+v, %v; want the third use allowed, none left", v, err)
	}
	wantEnd := base.Add(time.Hour + 5*time.Second) // 20 minutes on its clock
	if !v.ResetAt.Equal(wantEnd) {
		t.Fatalf("ResetAt %v, want %v", v.ResetAt, wantEnd)
	}
	if r, _ := to.PeekMany(t.Context(), e); r.Allowed || !r.RetryAt.Equal(wantEnd) {
		t.Fatalf("fourth use: %+v; want refused until %v", r, wantEnd)
	}
	if err := v.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r, _ := to.PeekMany(t.Context(), []limiter.Entry{{Key: "k", Limit: l, Cost: 2}}); r.Allowed {
		t.Fatalf("after one release two uses pass: %+v; want one given back", r)
	}
	// After the handed-over end the receiver's windows are its own: whole
	// hours on its clock.
	toClock.Advance(20 * time.Minute)
	v, err = to.ConsumeMany(t.Context(), e)
	if err != nil || !v.Allowed || v.Remaining != 2 || v.ResetAt.UnixMicro()%hour != 0 {
		t.Fatalf("next window: %+v, %v; want a fresh one ending on a whole hour", v, err)
	}
	to.Sweep()
	if to.Len() != 1 {
		t.Fatalf("Len %d, want 1", to.Len())
	}
	toClock.Advance(time.Hour)
	to.Sweep()
	if to.Len() != 0 {
		t.Fatalf("Len %d after the window ended, want 0 (every key expires)", to.Len())
	}
}

// A release gives back only its own window's use: once that window has
// ended, releasing a call made in it takes nothing off the next window.
func TestFixedWindowReleaseStaysInItsWindow(t *testing.T) {
	clock := limiter.NewFakeClock(time.UnixMilli(1_700_000_000_000 / 60_000 * 60_000)) // a whole minute
	m := limiter.NewMemory(limiter.MemoryConfig{Clock: clock, SweepInterval: -1})
	defer m.Close()
	e := []limiter.Entry{{Key: "k", Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Uses: 1, Window: time.Minute}}}
	old, err := m.ConsumeMany(limiter.WithRelease(t.Context()), e)
	if err != nil || !old.Allowed || old.Release == nil {
		t.Fatalf("first use: %+v, %v", old, err)
	}
	clock.Advance(time.Minute)
	if v, err := m.ConsumeMany(t.Context(), e); err != nil || !v.Allowed {
		t.Fatalf("the next window's use: %+v, %v", v, err)
	}
	if err := old.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if v, _ := m.PeekMany(t.Context(), e); v.Allowed {
		t.Fatalf("after releasing last window's use the next window's is free again: %+v; want it still counted", v)
	}
}
