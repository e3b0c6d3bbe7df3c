package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Token-bucket leases at the store (GrantBucket, ReturnBucket, expiry): 10
// tokens refilled at 10 per second (one per 100 ms), on a fake clock.

type bucketWorld struct {
	t   *testing.T
	clk *limiter.FakeClock
	m   *limiter.Memory
	l   limiter.Limit
	key string
}

func newBucketWorld(t *testing.T, burst int64) *bucketWorld {
	t.Helper()
	w := &bucketWorld{t: t, clk: limiter.NewFakeClock(time.Unix(1_700_000_000, 0)), key: "b",
		l: limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 10, Window: time.Second, Burst: burst}}
	w.m = w.newStore()
	return w
}

func (w *bucketWorld) newStore() *limiter.Memory {
	m := limiter.NewMemory(limiter.MemoryConfig{Clock: w.clk, SweepInterval: -1})
	w.t.Cleanup(func() { _ = m.Close() })
	return m
}

func (w *bucketWorld) now() int64 { return w.clk.Now().UnixMicro() }

func (w *bucketWorld) grant(step string, k int64, id uint64, expiry time.Duration) {
	w.t.Helper()
	o, err := w.m.GrantBucket(context.Background(), w.key, w.l, k, id, w.now()+limiter.Micros(expiry))
	if err != nil || !o.Allowed {
		w.t.Fatalf("%s: GrantBucket(%d) = %+v, %v; want allowed", step, k, o, err)
	}
}

// level is what a peek of one token says is left after it, plus one (the
// tokens the bucket holds now, 0 when a call of one is refused).
func (w *bucketWorld) level(step string) int64 {
	w.t.Helper()
	v, err := w.m.PeekMany(context.Background(), []limiter.Entry{{Key: w.key, Limit: w.l}})
	if err != nil {
		w.t.Fatalf("%s: peek: %v", step, err)
	}
	if !v.Allowed {
		return 0
	}
	return v.Remaining + 1
}

func (w *bucketWorld) wantLevel(step string, want int64) {
	w.t.Helper()
	if got := w.level(step); got != want {
		w.t.Fatalf("%s: bucket holds %d tokens, want %d", step, got, want)
	}
}

// The full-bucket case: the whole bucket leased, the holder spending its
// tokens late. While the lease is out, the bucket does not refill: a
// direct call finds nothing, however long the lease lasts. Without the
// floor the bucket would be full again after one second and a holder
// spending its 10 tokens then would make 20 within an instant.
func TestBucketLeaseFullBucketNoRefill(t *testing.T) {
	w := newBucketWorld(t, 0)
	w.wantLevel("start", 10)
	w.grant("grant all", 10, 1, 10*time.Second)
	for i := range 5 {
		w.clk.Advance(time.Second)
		w.wantLevel("lease out", 0)
		v, err := w.m.ConsumeMany(context.Background(), []limiter.Entry{{Key: w.key, Limit: w.l}})
		if err != nil || v.Allowed {
			t.Fatalf("second %d: a direct call while the whole bucket is leased: %+v, %v", i+1, v, err)
		}
	}
	if got := w.m.BucketHeld(w.key, w.l); got != 10 {
		t.Fatalf("held %d, want 10", got)
	}
	// The holder spent all 10 at the very end; they refill from the return.
	if !w.m.ReturnBucket(w.key, w.l, 1, 10) {
		t.Fatal("the return found no hold")
	}
	w.wantLevel("returned, all used", 0)
	w.clk.Advance(100 * time.Millisecond)
	w.wantLevel("100 ms after", 1)
	w.clk.Advance(time.Second)
	w.wantLevel("a second later", 10)
}

// A return gives back what was not used (k-u), never more, once.
func TestBucketLeaseReturnArithmetic(t *testing.T) {
	for _, c := range []struct {
		name        string
		k, used     int64
		wantAfter   int64 // the level after the return
		wantRefused bool
	}{
		{"none used", 6, 0, 10, false},
		{"two used", 6, 2, 8, false},
		{"all used", 6, 6, 4, false},
		{"more than k claimed used", 6, 9, 4, false},
		{"negative used", 6, -3, 10, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newBucketWorld(t, 0)
			w.grant("grant", c.k, 7, time.Second)
			w.wantLevel("granted", 10-c.k)
			if !w.m.ReturnBucket(w.key, w.l, 7, c.used) {
				t.Fatal("the return found no hold")
			}
			w.wantLevel("returned", c.wantAfter)
			if w.m.ReturnBucket(w.key, w.l, 7, 0) {
				t.Fatal("a second return of the same lease found a hold")
			}
			w.wantLevel("returned twice", c.wantAfter)
			if got := w.m.BucketHeld(w.key, w.l); got != 0 {
				t.Fatalf("held %d after the return, want 0", got)
			}
		})
	}
}

// The floor, step by step: 4 of 10 leased with 4 left; the bucket refills
// to 6 (B - held) and no further while the lease is out; two leases out at
// once floor it at B - 4 - 3.
func TestBucketLeaseFloor(t *testing.T) {
	w := newBucketWorld(t, 0)
	ctx := context.Background()
	v, err := w.m.ConsumeMany(ctx, []limiter.Entry{{Key: w.key, Limit: w.l, Cost: 2}})
	if err != nil || !v.Allowed {
		t.Fatalf("step 1: consume 2: %+v, %v", v, err)
	}
	w.grant("step 2", 4, 1, 10*time.Second) // 10-2-4 = 4 left
	w.wantLevel("step 2", 4)
	w.clk.Advance(200 * time.Millisecond)
	w.wantLevel("step 3: +200 ms", 6)
	w.clk.Advance(time.Second)
	w.wantLevel("step 4: +1.2 s, capped at B-held", 6)
	w.grant("step 5", 3, 2, 10*time.Second)
	w.wantLevel("step 5", 3)
	w.clk.Advance(time.Second)
	w.wantLevel("step 6: capped at B-7", 3)
	if !w.m.ReturnBucket(w.key, w.l, 1, 1) { // 3 of lease 1 back
		t.Fatal("step 7: return of lease 1 found no hold")
	}
	w.wantLevel("step 7: lease 1 back, 1 used", 6)
	w.clk.Advance(time.Second)
	w.wantLevel("step 8: capped at B-3", 7)
	if !w.m.ReturnBucket(w.key, w.l, 2, 3) {
		t.Fatal("step 9: return of lease 2 found no hold")
	}
	w.wantLevel("step 9: lease 2 back, all used", 7)
	w.clk.Advance(300 * time.Millisecond)
	w.wantLevel("step 10: refills again", 10)
}

// A hold its holder never returns (it crashed) ends at its expiry with
// nothing given back: its tokens count as taken at the expiry and refill
// from then on, even when nothing touched the bucket at that instant.
func TestBucketLeaseExpiry(t *testing.T) {
	w := newBucketWorld(t, 0)
	w.grant("grant", 5, 3, 300*time.Millisecond) // expires 300 ms on
	w.clk.Advance(500 * time.Millisecond)
	// At the expiry (300 ms) the floor put the arrival time at 300+500 ms:
	// 200 ms later the bucket holds 10 - 3 = 7.
	w.wantLevel("200 ms after the expiry", 7)
	if got := w.m.BucketHeld(w.key, w.l); got != 0 {
		t.Fatalf("held %d after the expiry, want 0", got)
	}
	if w.m.ReturnBucket(w.key, w.l, 3, 0) {
		t.Fatal("a return after the expiry found the hold")
	}
	w.wantLevel("late return: nothing back", 7)
	// The sweep keeps a bucket with holds and drops it once full.
	w.grant("grant 2", 2, 4, time.Second)
	w.m.Sweep()
	if w.m.Len() != 1 {
		t.Fatalf("the sweep dropped a bucket with a hold out: %d counters", w.m.Len())
	}
	w.clk.Advance(3 * time.Second)
	w.m.Sweep()
	if w.m.Len() != 0 {
		t.Fatalf("%d counters after the hold expired and the bucket refilled, want 0", w.m.Len())
	}
}

// Burst: the capacity is Burst, and a grant passes the burst check a
// consume of cost k would.
func TestBucketLeaseBurst(t *testing.T) {
	w := newBucketWorld(t, 4)
	if o, err := w.m.GrantBucket(context.Background(), w.key, w.l, 5, 1, w.now()+1_000_000); err == nil || o.Allowed {
		t.Fatalf("a grant of 5 from a burst of 4: %+v, %v; want the cost error", o, err)
	}
	w.grant("grant 3", 3, 2, 10*time.Second)
	w.clk.Advance(time.Second)
	w.wantLevel("capped at Burst-held", 1)
}

// A direct call's release while tokens are held gives back no more than
// the floor allows: the bucket stays at most B - held.
func TestBucketLeaseReleaseUnderFloor(t *testing.T) {
	w := newBucketWorld(t, 0)
	ctx := context.Background()
	v, rs, err := w.m.ConsumeReceipts(ctx, []limiter.Entry{{Key: w.key, Limit: w.l, Cost: 3}}, true)
	if err != nil || !v.Allowed {
		t.Fatalf("consume: %+v, %v", v, err)
	}
	w.grant("grant", 6, 1, 10*time.Second) // 1 left
	w.clk.Advance(200 * time.Millisecond)  // 3 left
	if err := w.m.ReleaseReceipts(ctx, rs); err != nil {
		t.Fatal(err)
	}
	w.wantLevel("released under the floor", 4) // B - held, not 3+1+...
}

// The holds travel with the bucket's state: a replica (Put) and a new
// owner (Import of a hand-off) keep the floor, and a return that reaches
// them finds the hold.
func TestBucketLeaseHoldsTravel(t *testing.T) {
	for _, how := range []string{"replica", "hand-off"} {
		t.Run(how, func(t *testing.T) {
			w := newBucketWorld(t, 0)
			w.grant("grant", 8, 9, 10*time.Second)
			var next *limiter.Memory
			if how == "replica" {
				states := w.m.Export(func(string) bool { return true }, false)
				next = w.newStore()
				next.Put(states)
			} else {
				states := w.m.Export(func(string) bool { return true }, true)
				next = w.newStore()
				next.Import(states)
			}
			w.m = next
			w.clk.Advance(5 * time.Second)
			w.wantLevel("new store, lease out", 2)
			if got := w.m.BucketHeld(w.key, w.l); got != 8 {
				t.Fatalf("held %d at the new store, want 8", got)
			}
			if !w.m.ReturnBucket(w.key, w.l, 9, 3) {
				t.Fatal("the return found no hold at the new store")
			}
			w.wantLevel("returned", 7)
		})
	}
}

// A hold that expired before an export, unseen by any call since, still
// leaves its floor in the state exported: the receiver counts the held
// tokens as taken at the expiry, as the sender does.
func TestBucketLeaseExpiredHoldExported(t *testing.T) {
	w := newBucketWorld(t, 0)
	w.grant("grant", 5, 3, 300*time.Millisecond)
	w.clk.Advance(500 * time.Millisecond)
	states := w.m.Export(func(string) bool { return true }, false)
	w.m = w.newStore()
	w.m.Put(states)
	w.wantLevel("the receiver, 200 ms after the expiry", 7)
}
