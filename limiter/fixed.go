package limiter

import (
	"strconv"
	"strings"
	"sync"
	"time"

	// The zone rules travel in the binary: every node (and every adapter
	// client) of one build computes the same calendar windows, whatever
	// the host's /usr/share/zoneinfo holds or lacks.
	_ "time/tzdata"
)

// ---- fixed window ----

// Calendar aligns a FixedWindow limit's windows to calendar units in a
// time zone instead of to multiples of its Window since the Unix epoch.
// The zero value, NoCalendar, is the epoch alignment.
type Calendar uint8

const (
	// NoCalendar: windows are [k*Window, (k+1)*Window) in Unix time.
	NoCalendar Calendar = iota
	// CalendarDay: from one midnight to the next in the limit's zone
	// (23 or 25 hours on the days a daylight-saving change falls on).
	CalendarDay
	// CalendarMonth: from the first of a month, 00:00, to the first of the
	// next (28 to 31 days).
	CalendarMonth
	// CalendarYear: from January 1st, 00:00, to the next (365 or 366 days).
	CalendarYear
	numCalendars
)

var calendarNames = [numCalendars]string{"", "d", "mo", "y"}

// calendarWindows are the nominal lengths a calendar limit's Window must
// hold: what a policy header shows and what sizes key lifetimes, the
// same figures envoyproxy/ratelimit uses for its units.
var calendarWindows = [numCalendars]time.Duration{
	0, 24 * time.Hour, 30 * 24 * time.Hour, 365 * 24 * time.Hour,
}

// String returns "d", "mo" or "y" (the unit of the limit syntax), "" for
// NoCalendar.
func (c Calendar) String() string {
	if c < numCalendars {
		return calendarNames[c]
	}
	return "Calendar(" + strconv.Itoa(int(c)) + ")"
}

// Window returns the nominal length of the unit (24h, 30 days, 365 days),
// which a calendar limit's Window must equal; 0 for NoCalendar.
func (c Calendar) Window() time.Duration {
	if c < numCalendars {
		return calendarWindows[c]
	}
	return 0
}

// CalendarLimit returns the FixedWindow limit of uses per calendar unit
// in zone (nil: UTC), with Window set to the unit's nominal length.
func CalendarLimit(uses int64, unit Calendar, zone *time.Location) Limit {
	return Limit{Algorithm: FixedWindow, Uses: uses, Window: unit.Window(), Calendar: unit, Zone: zone}
}

// zones caches time.LoadLocation: reading a zone's rules parses them, and
// a configuration names the same few zones again and again.
var zones sync.Map // string -> *time.Location

// LoadZone returns the IANA time zone name ("Europe/Paris"; "" and "UTC"
// are UTC), cached. "Local" is refused: two nodes' local zones may differ,
// and a key's windows must not depend on which node counts it.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if v, ok := zones.Load(name); ok {
		return v.(*time.Location), nil
	}
	if name == "Local" || strings.ContainsAny(name, " \t\n") {
		return nil, invalid("zone", "%q is not an IANA time zone name (e.g. Europe/Paris)", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, invalid("zone", "unknown time zone %q (want an IANA name such as Europe/Paris)", name)
	}
	zones.Store(name, loc)
	return loc, nil
}

// sameZone reports whether two locations have the same rules: a zone a
// caller loaded with time.LoadLocation is another pointer than LoadZone's.
// The offsets at a few instants across the years tell a FixedZone that
// borrowed an IANA name apart from that zone.
func sameZone(a, b *time.Location) bool {
	for _, sec := range [...]int64{0, 946684800, 1704067200, 1719792000, 1735689600} {
		na, oa := time.Unix(sec, 0).In(a).Zone()
		nb, ob := time.Unix(sec, 0).In(b).Zone()
		if oa != ob || na != nb {
			return false
		}
	}
	return true
}

// zoneName is the name a zone travels by (Limit.String, the wire): "" for
// UTC.
func zoneName(loc *time.Location) string {
	if loc == nil || loc == time.UTC {
		return ""
	}
	if n := loc.String(); n != "UTC" {
		return n
	}
	return ""
}

// ZoneName returns the IANA name of l's zone, "" for UTC (or no zone).
func (l Limit) ZoneName() string { return zoneName(l.Zone) }

// FixedBounds returns the fixed window holding now (µs on the store's
// clock, read as Unix µs): [start, end). Without a calendar it is the
// multiple of the window at or below now and the next one; with one, the
// calendar unit in l.Zone. This is the one place the windows are defined;
// the adapters use it (or, in Lua and PL/pgSQL, the same arithmetic for
// epoch windows and boundaries computed by it for calendar ones).
func FixedBounds(now int64, l Limit) (start, end int64) {
	if l.Calendar == NoCalendar || l.Calendar >= numCalendars {
		w := Micros(l.Window)
		if w <= 0 {
			return now, satAdd(now, 1)
		}
		start = now - ((now%w)+w)%w
		return start, satAdd(start, w)
	}
	loc := l.Zone
	if loc == nil {
		loc = time.UTC
	}
	t := time.UnixMicro(now).In(loc)
	y, m, d := t.Date()
	var s, e time.Time
	switch l.Calendar {
	case CalendarDay:
		s = time.Date(y, m, d, 0, 0, 0, 0, loc)
		e = time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case CalendarMonth:
		s = time.Date(y, m, 1, 0, 0, 0, 0, loc)
		e = time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	default:
		s = time.Date(y, 1, 1, 0, 0, 0, 0, loc)
		e = time.Date(y+1, 1, 1, 0, 0, 0, 0, loc)
	}
	// A zone whose midnight is skipped by a clock change (the day starts
	// at 01:00) still gives a start at or before now: time.Date moves the
	// missing instant forward, never past the instant it came from.
	start, end = s.UnixMicro(), e.UnixMicro()
	if start > now { // defensive: never a window that does not hold now
		start = now
	}
	return start, end
}

// FixedState is a fixed-window counter: Count uses in the window that
// ends at End (µs on the store's clock). It is O(1) per key: the window's
// start is never needed, as a call at or after End opens a new one.
type FixedState struct {
	// End is when the counted window ends (µs); the counter is whole again
	// from End on.
	End int64
	// Count is the uses counted in the window ending at End.
	Count int64
}

// Advance opens the window holding now when the counted one has ended
// (or nothing is counted). A state whose End lies more than a window
// ahead (handed over from a clock ahead of ours) is kept: it counts until
// its End, so a merge never counts less.
func (s *FixedState) Advance(now int64, l Limit) {
	if s.Count == 0 || now >= s.End {
		_, s.End = FixedBounds(now, l)
		s.Count = 0
	}
}

// Decide answers whether cost more uses fit at now; it only advances.
// A call passes while the window's count plus its cost stays within Uses;
// a refusal waits for the window's end, which is also its reset.
func (s *FixedState) Decide(now int64, l Limit, cost int64) Outcome {
	s.Advance(now, l)
	if cost <= l.Uses-s.Count { // not Count+cost: that overflows at the largest Uses
		return Outcome{Allowed: true, Remaining: l.Uses - s.Count - cost, Reset: s.End}
	}
	return Outcome{Remaining: max(l.Uses-s.Count, 0), Wait: max(s.End-now, 1), Reset: s.End}
}

// DecideDebit answers a debit of cost at now (Entry.Debit); it only
// advances, and the caller records the debit with Record whatever the
// outcome. Allowed reports that the window did not already count more
// than Uses; Remaining is what is left after the debit (at least 0).
// When refused, Wait is until the window's end, which is also the reset.
func (s *FixedState) DecideDebit(now int64, l Limit, cost int64) Outcome {
	s.Advance(now, l)
	o := Outcome{Allowed: s.Count <= l.Uses, Remaining: max(l.Uses-satAdd(s.Count, cost), 0), Reset: s.End}
	if !o.Allowed {
		o.Wait = max(s.End-now, 1)
	}
	return o
}

// Record counts a call; callers decided (and so advanced) first.
func (s *FixedState) Record(cost int64) { s.Count = satAdd(s.Count, cost) }

// Remove gives back cost uses counted in the window that ends at end. The
// window is matched to the nearest end within half a (nominal) window, so
// a receipt whose times crossed a network still finds it; a receipt of a
// window that has ended gives nothing back.
func (s *FixedState) Remove(now int64, l Limit, end, cost int64) bool {
	if now >= s.End || s.Count == 0 {
		return false
	}
	half := Micros(l.Window) / 2
	if d := end - s.End; d < -half || d > half {
		return false
	}
	s.Count = max(s.Count-cost, 0)
	return true
}

// Empty reports whether the counter counts nothing at now (its state can
// go).
func (s *FixedState) Empty(now int64) bool { return s.Count == 0 || now >= s.End }

// mergeFixed merges two fixed-window states on one clock: a merge can
// only count more. Equal ends keep the larger count (importing twice
// changes nothing); otherwise the later window wins, carrying the larger
// count when both are still counting (a window handed over from a clock
// slightly ahead lands a little after ours).
func mergeFixed(a, b FixedState, now int64) FixedState {
	aLive, bLive := !a.Empty(now), !b.Empty(now)
	switch {
	case !bLive:
		return a
	case !aLive:
		return b
	}
	return FixedState{End: max(a.End, b.End), Count: max(a.Count, b.Count)}
}

// CalendarEnds returns, for a calendar limit, the boundaries an adapter
// that cannot compute zones (Lua, PL/pgSQL) picks its window from: the
// start and end of the window holding now (the caller's clock), and the
// end of the next. A server clock within a window of the caller's finds
// its window among them (FixedEndAmong).
func CalendarEnds(now int64, l Limit) (e0, e1, e2 int64) {
	e0, e1 = FixedBounds(now, l)
	_, e2 = FixedBounds(e1, l)
	return e0, e1, e2
}

// FixedEndAmong is the adapters' arithmetic for a calendar window: the
// end of the window holding now among the boundaries of CalendarEnds, or
// false when now lies beyond them (the two clocks are a window apart).
func FixedEndAmong(now, e0, e1, e2 int64) (int64, bool) {
	switch {
	case now < e0:
		return e0, true
	case now < e1:
		return e1, true
	case now < e2:
		return e2, true
	}
	return 0, false
}
