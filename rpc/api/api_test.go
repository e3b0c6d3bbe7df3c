package api

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Keys pushed to a stream gather until it takes them; past
// maxPendingInvalidations the stream is told to drop everything instead
// of growing without bound.
func TestPushesBounded(t *testing.T) {
	p := newPushes()
	s := p.subscribe()
	defer p.unsubscribe(s)
	p.invalidate([]string{"a", "b"})
	p.invalidate([]string{"b"})
	m := s.take()
	if m == nil || m.GetInvalidateAll() || len(m.GetInvalidated()) != 2 {
		t.Fatalf("after a, b, b: %v; want the two keys", m)
	}
	if m := s.take(); m != nil {
		t.Fatalf("nothing pending, took %v", m)
	}
	keys := make([]string, maxPendingInvalidations+1)
	for i := range keys {
		keys[i] = string(rune('a'+i%26)) + time.Duration(i).String()
	}
	p.invalidate(keys)
	if m := s.take(); m == nil || !m.GetInvalidateAll() || len(m.GetInvalidated()) != 0 {
		t.Fatalf("past the bound: %v; want invalidate_all and no keys", m)
	}
}

// A release id gives its uses back once; an unknown or used id gives
// nothing back and is no error; past the table's bound the
// soonest-ending half goes.
func TestReleasesOnce(t *testing.T) {
	r := newReleases(4)
	calls := 0
	fn := func(context.Context) error { calls++; return nil }
	id := r.put(fn, time.Now().Add(time.Hour))
	for range 2 {
		if err := r.release(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.release(t.Context(), 12345); err != nil || calls != 1 {
		t.Fatalf("calls %d err %v; want the release run once", calls, err)
	}
	for range 10 {
		r.put(fn, time.Now().Add(time.Hour))
	}
	if n := len(r.m); n > 4 {
		t.Fatalf("table holds %d releases, bound 4", n)
	}
}
