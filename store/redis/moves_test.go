package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/store/internal/sqlstore/sqltest"
)

// A token bucket's release after a move gives back only its call's own
// tokens (limiter.BucketMoves), through the script with its clock pinned:
// the SQL stores' scenario.
func TestBucketMoves(t *testing.T) {
	s := newStore(t, singleClient(t), Config{})
	sqltest.BucketMoves(t, s, func(now func() int64) { s.pin = now })
}

// A bucket's hash as the script wrote it before the moves record ({t, m,
// r, u}, no i, v, w, x) decodes as a bucket with no record: calls and
// releases on it count as before, and a release on it begins a record.
func TestBucketMovesOldHash(t *testing.T) {
	client := singleClient(t)
	s := newStore(t, client, Config{})
	const base = 1704067200_000_000
	now := int64(base)
	s.pin = func() int64 { return now }
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 4, Window: 20 * time.Millisecond}
	e := limiter.Entry{Key: fmt.Sprintf("old-hash-%d", time.Now().UnixNano()), Limit: l}
	items, _ := s.items([]limiter.Entry{e})
	key := items[0].key
	ctx := context.Background()
	// Two tokens taken: the arrival time 10 ms ahead.
	if err := client.HSet(ctx, key, "t", (base+10_000)/1000, "m", 0, "r", 0, "u", 4).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.PExpire(ctx, key, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	take := func(cost int64, allowed bool, what string) limiter.Verdict {
		t.Helper()
		e.Cost = cost
		v, err := s.ConsumeMany(limiter.WithRelease(ctx), []limiter.Entry{e})
		if err != nil || v.Allowed != allowed {
			t.Fatalf("%s: Consume(%d) = %+v, %v; want allowed %v", what, cost, v, err, allowed)
		}
		return v
	}
	v := take(2, true, "2 on the old hash")
	take(1, false, "full")
	if err := v.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := client.HGet(ctx, key, "i").Val(); got == "" || got == "0" {
		t.Fatalf("after a release the hash has no moves record (i = %q)", got)
	}
	second := take(2, true, "the 2 given back")
	take(1, false, "full again")
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	take(2, true, "a receipt stamped by the record gives back all of its call")
}
