package storetest

import (
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// The fixed-window vectors. A window is [k*w, (k+1)*w) in Unix time, or a
// calendar unit in a zone; a call passes while the window's count plus its
// cost stays within the uses, a refusal waits for the window's end, and
// the reset is always the window's end. The calendar vectors run at named
// instants (Vector.Start); their window lengths were taken from the IANA
// rules by Python's zoneinfo, not by Go, so the two tz readings check
// each other.

const (
	sec  = 1000 * ms
	min_ = 60 * sec
	hour = 60 * min_
	day  = 24 * hour
)

// Named instants, Unix µs.
const (
	feb2024       = 1706745600_000_000 // 2024-02-01T00:00:00Z
	parisSpring24 = 1711839600_000_000 // 2024-03-31T00:00:00+01:00, a 23-hour day
	parisFall24   = 1729980000_000_000 // 2024-10-27T00:00:00+02:00, a 25-hour day
	newYorkMar24  = 1709269200_000_000 // 2024-03-01T00:00:00-05:00, a month of 743 hours
)

func zone(name string) *time.Location {
	loc, err := limiter.LoadZone(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// FixedVectors are the fixed-window vectors, also part of Vectors.
var FixedVectors = []Vector{
	{
		Name:  "fixed-window/fill-then-wait-for-the-window-end",
		Limit: lim(limiter.FixedWindow, 3, 10*time.Millisecond),
		Steps: []Step{
			consume(0, 1, ok(2, 10*ms)),
			consume(4*ms, 1, ok(1, 10*ms)),
			consume(9999, 1, ok(0, 10*ms)),
			consume(9999, 1, no(0, 1, 10*ms)), // the window ends at 10ms
			peek(9999, 1, no(0, 1, 10*ms)),    // the refusal recorded nothing
			consume(10*ms, 1, ok(2, 20*ms)),   // a new window: all uses back at once
			consume(15*ms, 2, ok(0, 20*ms)),
			consume(19*ms, 1, no(0, 1*ms, 20*ms)),
			peek(35*ms, 1, ok(2, 40*ms)), // a window with no call in it counts nothing
			consume(35*ms, 3, ok(0, 40*ms)),
		},
	},
	{
		Name:  "fixed-window/cost-and-remaining",
		Limit: lim(limiter.FixedWindow, 5, time.Second),
		Steps: []Step{
			consume(0, 2, ok(3, 1*sec)),
			peek(500*ms, 3, ok(0, 1*sec)),
			consume(500*ms, 4, no(3, 500*ms, 1*sec)), // a refusal costs nothing: still 3
			consume(500*ms, 3, ok(0, 1*sec)),
			consume(1*sec-1, 1, no(0, 1, 1*sec)),
			consume(1*sec, 5, ok(0, 2*sec)),
		},
	},
	{
		Name:  "fixed-window/aligned-to-the-epoch-not-to-the-first-call",
		Limit: lim(limiter.FixedWindow, 2, time.Hour),
		Steps: []Step{
			consume(30*min_, 1, ok(1, 1*hour)), // the base is a whole hour: the window ends there
			consume(hour-500*ms, 1, ok(0, 1*hour)),
			consume(hour-500*ms, 1, no(0, 500*ms, 1*hour)),
			consume(hour, 1, ok(1, 2*hour)),
		},
	},
	{
		Name:  "fixed-window/1d-is-a-utc-day",
		Limit: lim(limiter.FixedWindow, 1, 24*time.Hour),
		Steps: []Step{
			// The base, 2024-01-01T00:00Z, is a multiple of 86400 s.
			consume(23*hour, 1, ok(0, 1*day)),
			consume(day-1, 1, no(0, 1, 1*day)),
			consume(day, 1, ok(0, 2*day)),
		},
	},
	{
		Name:  "fixed-window/same-microsecond-in-a-1ms-window",
		Limit: lim(limiter.FixedWindow, 2, time.Millisecond),
		Steps: []Step{
			consume(0, 1, ok(1, 1*ms)),
			consume(0, 1, ok(0, 1*ms)),
			consume(0, 1, no(0, 1*ms, 1*ms)),
			consume(999, 1, no(0, 1, 1*ms)),
			consume(1*ms, 2, ok(0, 2*ms)),
		},
	},
	{
		Name:  "fixed-window/292-year-window",
		Limit: lim(limiter.FixedWindow, 1, limiter.MaxWindow),
		Steps: []Step{
			consume(0, 1, ok(0, w292)),
			consume(1, 1, no(0, w292-1, w292)),
			peek(w292-1, 1, no(0, 1, w292)),
		},
	},
	{
		Name:  "fixed-window/largest-uses",
		Limit: lim(limiter.FixedWindow, maxUses, time.Millisecond),
		Steps: []Step{
			consume(0, maxUses-1, ok(1, 1*ms)),
			consume(1, 1, ok(0, 1*ms)),
			consume(2, 1, no(0, 998, 1*ms)),
			consume(1*ms, maxUses, ok(0, 2*ms)),
		},
	},
	{
		Name:  "fixed-window/calendar-month-february-of-a-leap-year",
		Start: feb2024,
		Limit: limiter.CalendarLimit(2, limiter.CalendarMonth, nil),
		Steps: []Step{
			consume(0, 1, ok(1, 29*day)), // February 2024 has 29 days, not 30
			consume(28*day, 1, ok(0, 29*day)),
			consume(28*day+12*hour, 1, no(0, 12*hour, 29*day)),
			consume(29*day, 1, ok(1, 29*day+31*day)), // March: 31 days
		},
	},
	{
		Name:  "fixed-window/calendar-year-of-366-days",
		Start: epoch2024,
		Limit: limiter.CalendarLimit(1, limiter.CalendarYear, nil),
		Steps: []Step{
			consume(0, 1, ok(0, 366*day)),
			consume(365*day, 1, no(0, 1*day, 366*day)), // 2024-12-31 is still 2024
			consume(366*day, 1, ok(0, 366*day+365*day)),
		},
	},
	{
		Name:  "fixed-window/calendar-day-in-paris-of-23-hours",
		Start: parisSpring24,
		Limit: limiter.CalendarLimit(1, limiter.CalendarDay, zone("Europe/Paris")),
		Steps: []Step{
			consume(0, 1, ok(0, 23*hour)),
			consume(22*hour+59*min_, 1, no(0, 1*min_, 23*hour)),
			consume(23*hour, 1, ok(0, 23*hour+24*hour)), // 2024-04-01: 24 hours
		},
	},
	{
		Name:  "fixed-window/calendar-day-in-paris-of-25-hours",
		Start: parisFall24,
		Limit: limiter.CalendarLimit(2, limiter.CalendarDay, zone("Europe/Paris")),
		Steps: []Step{
			consume(0, 1, ok(1, 25*hour)),
			consume(24*hour, 1, ok(0, 25*hour)), // 24 hours in, still October 27th
			peek(24*hour, 1, no(0, 1*hour, 25*hour)),
			consume(25*hour, 2, ok(0, 25*hour+24*hour)),
		},
	},
	{
		Name:  "fixed-window/calendar-month-in-new-york",
		Start: newYorkMar24,
		Limit: limiter.CalendarLimit(1, limiter.CalendarMonth, zone("America/New_York")),
		Steps: []Step{
			consume(0, 1, ok(0, 743*hour)), // 31 days less the hour DST took
			consume(742*hour, 1, no(0, 1*hour, 743*hour)),
			consume(743*hour, 1, ok(0, 743*hour+720*hour)), // April: 30 days
		},
	},
}

func init() { Vectors = append(Vectors, FixedVectors...) }
