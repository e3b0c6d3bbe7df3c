package cluster

import (
	"fmt"
	"sync"
	"testing"

	"github.com/ringlimit/ringlimit/ring"
)

func ringOf(t testing.TB, n int) *ring.Ring {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint("m", i)
	}
	r, err := ring.New(names, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ringConfig(load float64) ring.Config { return ring.Config{Load: load} }

// A subscriber that reads nothing while many rings are published gets, once
// it reads, a gap-free chain that ends at the newest ring.
func TestSubscriberCoalesces(t *testing.T) {
	rings := make([]*ring.Ring, 50)
	for i := range rings {
		rings[i] = ringOf(t, i%10+1)
	}
	s := &subscriber{ch: make(chan Change, subscriberBuffer), last: rings[0]}
	for _, r := range rings[1:] {
		s.send(r) // never blocks
	}
	last := rings[0]
	n := 0
	for len(s.ch) > 0 {
		c := <-s.ch
		if c.Prev != last {
			t.Fatalf("change %d: Prev %v, want %v", n, c.Prev, last)
		}
		last = c.Next
		n++
	}
	if last != rings[len(rings)-1] {
		t.Fatalf("last Next %v, want the newest ring", last)
	}
	if n > subscriberBuffer {
		t.Fatalf("%d changes buffered", n)
	}
}

// The same with a reader racing the publisher.
func TestSubscriberConcurrentReader(t *testing.T) {
	rings := make([]*ring.Ring, 200)
	for i := range rings {
		rings[i] = ringOf(t, i%5+1)
	}
	s := &subscriber{ch: make(chan Change, 4), last: rings[0]}
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := rings[0]
		for c := range s.ch {
			if c.Prev != last {
				errs <- fmt.Errorf("Prev %p, want %p", c.Prev, last)
				return
			}
			last = c.Next
		}
		if last != rings[len(rings)-1] {
			errs <- fmt.Errorf("ended at %p, want the newest ring", last)
		}
	}()
	for _, r := range rings[1:] {
		s.send(r)
	}
	close(s.ch)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}
