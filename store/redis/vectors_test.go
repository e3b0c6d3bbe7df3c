package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/limiter/storetest"
)

// The limiter's step tables run through the Lua script with its clock
// pinned, and must give the answers package limiter gives.
func TestVectors(t *testing.T) {
	client := singleClient(t)
	s := newStore(t, client, Config{})
	var now int64
	s.pin = func() int64 { return now }
	ctx := context.Background()
	// Each vector's key is its name, under this run's fresh prefix.
	storetest.RunVectors(t, func(t *testing.T, v storetest.Vector, base int64, step storetest.Step) limiter.Outcome {
		// The sliding log scores uses by their µs in doubles: exact up to
		// 2^53 µs, where the server's clock stands until 2255. Its
		// 292-year vector spans more than that from any base >= 0, so it
		// runs from a base moved down by a constant (the log's arithmetic
		// does not depend on the origin; the window's, aligned to multiples
		// of the window, is never moved).
		shift := int64(0)
		if v.Limit.Algorithm == limiter.SlidingLog && base+last(v) >= 1<<52 {
			shift = base + last(v)/2
		}
		now = base + step.At - shift
		e := v.EntryAt(v.Name, step)
		items, _ := s.items([]limiter.Entry{e})
		op := map[string]string{storetest.OpConsume: opConsume, storetest.OpPeek: opPeek,
			storetest.OpDebit: opDebit, storetest.OpPeekDebit: opPeekDebit}[step.Op]
		if err := checkExact([]limiter.Entry{e}); err != nil {
			// Limits past the script's exact range are refused, never rounded.
			var ie *limiter.InputError
			if !errors.As(err, &ie) || ie.Field != "entries[0].limit.uses" {
				t.Fatalf("%s: error %v, want an InputError naming entries[0].limit.uses", v.Name, err)
			}
			if _, err := s.ConsumeMany(ctx, []limiter.Entry{e}); !errors.As(err, &ie) {
				t.Fatalf("%s: ConsumeMany error %v, want the InputError", v.Name, err)
			}
			// The refusal is what this adapter answers; the vector's own
			// arithmetic is out of its range.
			o := step.Want
			o.Reset += base
			return o
		}
		if err := s.runBatch(ctx, items, op); err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		o := items[0].out
		o.Reset += shift
		return o
	})
}

func last(v storetest.Vector) int64 { return v.Steps[len(v.Steps)-1].At }

// The same tables through the whole store (ConsumeMany/PeekMany with the
// clock pinned): the verdicts, RetryAt rounding included, match.
func TestVerdictVectors(t *testing.T) { verdictVectors(t, 0) }

// The same again with the short form's reply reference a day off the
// clock, as behind a server clock a day wrong: the short form then
// answers with its table, never the packed integer, and the verdicts are
// the same.
func TestVerdictVectorsFarReference(t *testing.T) {
	verdictVectors(t, -24*time.Hour.Milliseconds())
	verdictVectors(t, 24*time.Hour.Milliseconds())
}

func verdictVectors(t *testing.T, refSkew int64) {
	client := singleClient(t)
	s := newStore(t, client, Config{})
	s.refSkew = refSkew
	var now int64
	s.pin = func() int64 { return now }
	storetest.RunVerdictVectors(t, func(t *testing.T, v storetest.Vector, base int64, step storetest.Step) limiter.Verdict {
		shift := int64(0)
		if v.Limit.Algorithm == limiter.SlidingLog && base+last(v) >= 1<<52 {
			shift = base + last(v)/2
		}
		now = base + step.At - shift
		e := []limiter.Entry{v.EntryAt(v.Name, step)}
		call := s.ConsumeMany
		if step.Peek() {
			call = s.PeekMany
		}
		got, err := call(context.Background(), e)
		var ie *limiter.InputError
		if errors.As(err, &ie) && ie.Field == "entries[0].limit.uses" && checkExact(e) != nil {
			return step.WantVerdict(base) // refused as out of range, checked in TestVectors
		}
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		if !got.RetryAt.IsZero() {
			got.RetryAt = time.UnixMicro(got.RetryAt.UnixMicro() + shift)
		}
		if !got.ResetAt.IsZero() {
			got.ResetAt = time.UnixMicro(got.ResetAt.UnixMicro() + shift)
		}
		return got
	})
}

// The concurrency limits' step tables through the whole store with its
// clock pinned: slots taken, refused, released (by their member ids) and
// freed at their TTL as in package limiter.
func TestSlotVectors(t *testing.T) {
	client := singleClient(t)
	s := newStore(t, client, Config{})
	var now int64
	s.pin = func() int64 { return now }
	storetest.RunSlotVectors(t, func(t *testing.T, v storetest.Vector, base int64, step storetest.Step) limiter.Verdict {
		now = base + step.At
		e := []limiter.Entry{v.EntryAt(v.Name, step)}
		call := s.ConsumeMany
		if step.Peek() {
			call = s.PeekMany
		}
		got, err := call(limiter.WithRelease(context.Background()), e)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		return got
	})
}
