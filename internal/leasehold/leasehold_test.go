package leasehold

import (
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/limiter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A lease ends here at its request's send time plus its length (before it
// ends at the owner), admits at most K uses, gives a releasable use back
// while held, and returns its uses as ages, grouped when not releasable.
func TestTableLease(t *testing.T) {
	clk := limiter.NewFakeClock(time.Unix(1_700_000_000, 0))
	tb := New(Config{Now: clk.Now, Length: 100 * time.Millisecond, Hot: 2, HotSpan: time.Millisecond})
	e := limiter.Entry{Key: "k", Limit: limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 100, Window: time.Second}}
	if _, ok := tb.Take(e, false); ok {
		t.Fatal("admitted without a lease")
	}
	tb.Want(e)
	k, length, ok := tb.Want(e)
	if !ok || k < 1 || length != 100*time.Millisecond {
		t.Fatalf("Want after 2 calls = %d, %v, %v; want an ask", k, length, ok)
	}
	if _, _, again := tb.Want(e); again {
		t.Fatal("asked twice while a request is under way")
	}
	sent := clk.Now()
	clk.Advance(30 * time.Millisecond) // the grant's round trip
	tb.Install(sent, Grant{ID: 7, Owner: "o", Key: "k", Limit: e.Limit, K: 3, Length: 100 * time.Millisecond})
	id1, ok1 := tb.Take(e, true)
	_, ok2 := tb.Take(e, false)
	_, ok3 := tb.Take(e, false)
	if !ok1 || !ok2 || !ok3 {
		t.Fatal("a lease of 3 did not admit 3")
	}
	if _, ok := tb.Take(e, false); ok {
		t.Fatal("a lease of 3 admitted a 4th use")
	}
	if !tb.Give(e, id1) {
		t.Fatal("a releasable use was not given back to its held lease")
	}
	if _, ok := tb.Take(e, false); !ok {
		t.Fatal("a use given back was not admitted again")
	}
	clk.Advance(69 * time.Millisecond) // 99 ms after the send: still held
	if rets := tb.Due(); len(rets) != 1 {
		// Spent (3 of 3), so due before its end.
		t.Fatalf("a spent lease is due: got %d returns", len(rets))
	} else if r := rets[0]; r.ID != 7 || r.Used != 3 || len(r.Uses) != 1 || r.Uses[0].AgeUs != 69_000 {
		t.Fatalf("return = %+v; want lease 7, 3 used, grouped at the latest use's age (69 ms)", r)
	}
	// A new lease ends at send+Length by the holder's clock.
	sent = clk.Now()
	clk.Advance(50 * time.Millisecond)
	tb.Install(sent, Grant{ID: 8, Owner: "o", Key: "k", Limit: e.Limit, K: 10, Length: 100 * time.Millisecond})
	clk.Advance(49 * time.Millisecond)
	if _, ok := tb.Take(e, false); !ok {
		t.Fatal("not admitted 99 ms after the send")
	}
	clk.Advance(time.Millisecond)
	if _, ok := tb.Take(e, false); ok {
		t.Fatal("admitted at send+Length: the lease must have ended here")
	}
	if rets := tb.Due(); len(rets) != 1 || tb.Stats().Expired.Load() != 1 {
		t.Fatalf("an ended lease is due and counted expired: %d returns, %d expired", len(rets), tb.Stats().Expired.Load())
	}
}

// Token buckets are leased (debits and sliding windows are not), and a
// bucket's return is just the count used: the owner takes the used tokens
// at the return, so no ages travel. A releasable use still goes back to
// the lease while it is held.
func TestTableBucketLease(t *testing.T) {
	bucket := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 100, Window: time.Second, Burst: 50}
	for _, c := range []struct {
		e    limiter.Entry
		want bool
	}{
		{limiter.Entry{Key: "k", Limit: bucket}, true},
		{limiter.Entry{Key: "k", Limit: bucket, Debit: true}, false},
		{limiter.Entry{Key: "k", Limit: limiter.Limit{Algorithm: limiter.SlidingWindow, Uses: 100, Window: time.Second}}, false},
	} {
		if got := Leasable(c.e); got != c.want {
			t.Errorf("Leasable(%+v) = %v, want %v", c.e, got, c.want)
		}
	}
	clk := limiter.NewFakeClock(time.Unix(1_700_000_000, 0))
	tb := New(Config{Now: clk.Now, Length: 100 * time.Millisecond})
	e := limiter.Entry{Key: "k", Limit: bucket}
	tb.Install(clk.Now(), Grant{ID: 9, Owner: "o", Key: "k", Limit: bucket, K: 5, Length: 100 * time.Millisecond})
	id, _ := tb.Take(e, true)
	for range 2 {
		clk.Advance(10 * time.Millisecond)
		if _, ok := tb.Take(e, false); !ok {
			t.Fatal("a bucket lease of 5 did not admit")
		}
	}
	if !tb.Give(e, id) {
		t.Fatal("a releasable bucket use was not given back to its held lease")
	}
	rets := tb.Recall([]uint64{9})
	if len(rets) != 1 || rets[0].Used != 2 || len(rets[0].Uses) != 1 || rets[0].Uses[0] != (Use{Cost: 2}) {
		t.Fatalf("bucket return = %+v; want 2 used, as one use of cost 2 and no age", rets)
	}
}

// The cold filter answers calls of counters that hold no lease and had no
// call within HotSpan without the lock or a meter, and changes no answer:
// a hot counter asks on its Hot-th call within HotSpan as before (the
// filter's first call counted by fingerprint), a counter sharing its slot
// does not count the other's calls as its own, and a lease held is found
// whatever the spacing of its calls.
func TestTableColdFilter(t *testing.T) {
	clk := limiter.NewFakeClock(time.Unix(1_700_000_000, 0))
	tb := New(Config{Now: clk.Now, Length: 100 * time.Millisecond, Hot: 3, HotSpan: 5 * time.Millisecond})
	limit := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 100, Window: time.Second}
	entry := func(key string) limiter.Entry { return limiter.Entry{Key: key, Limit: limit} }
	meters := func() int {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		return len(tb.meters)
	}

	// Cold calls: 1,000 keys, each 10 ms after its last call, 10 µs after
	// the one before (500 calls within HotSpan: about one in eight finds
	// its slot taken by another counter's call and goes the exact way).
	for round := 0; round < 3; round++ {
		for i := 0; i < 1000; i++ {
			if _, ok, _, _, asking := tb.TakeOrAsk(entry("cold"+strconv.Itoa(i)), false); ok || asking {
				t.Fatal("a cold counter found a lease or asked for one")
			}
			clk.Advance(10 * time.Microsecond)
		}
	}
	if n := meters(); n > 250 {
		t.Fatalf("cold counters made %d meters of 1,000; the filter should answer most of their calls", n)
	}

	// A hot counter asks on its third call within HotSpan.
	clk.Advance(time.Second)
	hot := entry("hot")
	for i := 1; i <= 2; i++ {
		if _, _, _, _, asking := tb.TakeOrAsk(hot, false); asking {
			t.Fatalf("asked on call %d of 3", i)
		}
		clk.Advance(time.Millisecond)
	}
	if _, _, _, _, asking := tb.TakeOrAsk(hot, false); !asking {
		t.Fatal("a counter with 3 calls within HotSpan did not ask: the filter's call went uncounted")
	}

	// A counter of the same slot with another fingerprint: the hot one's
	// call just before is not its own.
	slot, fp := slotOf(CounterOf(hot))
	var twin limiter.Entry
	for i := 0; ; i++ {
		e := entry("twin" + strconv.Itoa(i))
		if s, f := slotOf(CounterOf(e)); s == slot && f != fp {
			twin = e
			break
		}
	}
	clk.Advance(time.Second)
	tb.TakeOrAsk(hot, false)
	clk.Advance(time.Millisecond)
	tb.TakeOrAsk(twin, false)
	clk.Advance(time.Millisecond)
	if _, _, _, _, asking := tb.TakeOrAsk(twin, false); asking {
		t.Fatal("a counter asked on its second call: its slot's other counter was counted as its own")
	}

	// A lease is found by calls 50 ms apart (none within HotSpan), and
	// once it goes back the slot answers cold calls again.
	tb.Install(clk.Now(), Grant{ID: 1, Owner: "o", Key: "hot", Limit: limit, K: 5, Length: 100 * time.Millisecond})
	clk.Advance(50 * time.Millisecond)
	if _, ok, _, _, _ := tb.TakeOrAsk(hot, false); !ok {
		t.Fatal("a held lease was not found by a call after a quiet HotSpan")
	}
	if _, ok := tb.Take(hot, false); !ok {
		t.Fatal("Take did not find a held lease")
	}
	clk.Advance(60 * time.Millisecond)
	if rets := tb.Due(); len(rets) != 1 {
		t.Fatalf("the ended lease is due: %d returns", len(rets))
	}
	if n := tb.leased[slot].Load(); n != 0 {
		t.Fatalf("the slot counts %d leases after the only one went back", n)
	}
	if _, ok := tb.Take(hot, false); ok {
		t.Fatal("Take admitted from a lease that went back")
	}
}
