package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/limiter"
)

// The fleet client answers a refused hot key itself: after a refusal with
// a wait, calls for the counter (alone or in a batch) are refused with the
// same RetryAt and make no RPC, until uses come back at the owner. Then
// the nodes push the key on the client's stream and the key passes again
// long before its RetryAt.
func TestClientRefusalCache(t *testing.T) {
	tc := startCluster(t, 3, nil)
	c := dialCluster(t, tc, nil)
	other := dialCluster(t, tc, nil)
	ctx := context.Background()
	lim := limiter.Limit{Uses: 2, Window: time.Hour}
	hot := []limiter.Entry{{Key: "hot", Limit: lim}}
	if v, err := c.ConsumeMany(ctx, hot); err != nil || !v.Allowed {
		t.Fatalf("first call: %+v %v", v, err)
	}
	// The second use is another client's, so that its release reaches c
	// only by the nodes' push.
	v2, err := other.ConsumeMany(limiter.WithRelease(ctx), hot)
	if err != nil || !v2.Allowed || v2.Release == nil {
		t.Fatalf("second call: %+v %v; want allowed with a Release", v2, err)
	}
	refused, err := c.ConsumeMany(ctx, hot)
	if err != nil || refused.Allowed || refused.RetryAt.IsZero() {
		t.Fatalf("third call: %+v %v; want refused with a RetryAt", refused, err)
	}
	before := c.Stats()
	for i := range 5 {
		v, err := c.ConsumeMany(ctx, hot)
		if err != nil || v.Allowed || !v.RetryAt.Equal(refused.RetryAt) || v.RetryAfter <= 0 || v.RetryAfter > refused.RetryAfter {
			t.Fatalf("cached call %d: %+v %v; want refused at RetryAt %v, waiting at most %v", i+1, v, err, refused.RetryAt, refused.RetryAfter)
		}
	}
	batch := []limiter.Entry{{Key: "cold", Limit: lim}, hot[0]}
	if v, err := c.ConsumeMany(ctx, batch); err != nil || v.Allowed || !v.RetryAt.Equal(refused.RetryAt) {
		t.Fatalf("a batch holding the refused key: %+v %v; want refused at its RetryAt", v, err)
	}
	after := c.Stats()
	if after.Calls != before.Calls || after.CacheHits-before.CacheHits != 6 {
		t.Fatalf("calls sent %d -> %d, cache hits %d -> %d; want no call sent and 6 hits", before.Calls, after.Calls, before.CacheHits, after.CacheHits)
	}
	if v, err := c.PeekMany(ctx, []limiter.Entry{{Key: "cold", Limit: lim}}); err != nil || !v.Allowed {
		t.Fatalf("the batch's other key: %+v %v; want it untouched by the refused batch", v, err)
	}
	// The other client gives its use back: the owner drops the refusals,
	// and every node pushes the key to its clients' streams.
	if err := v2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the released use to pass through the client that cached the refusal", func() bool {
		v, err := c.ConsumeMany(ctx, hot)
		return err == nil && v.Allowed
	})
}

// With the cache off, every refused call is a round trip.
func TestClientRefusalCacheOff(t *testing.T) {
	tc := startCluster(t, 1, nil)
	c := dialCluster(t, tc, func(cfg *client.Config) { cfg.RefusalCacheSize = -1 })
	ctx := context.Background()
	hot := []limiter.Entry{{Key: "hot", Limit: limiter.Limit{Uses: 1, Window: time.Hour}}}
	for range 4 {
		if _, err := c.ConsumeMany(ctx, hot); err != nil {
			t.Fatal(err)
		}
	}
	if s := c.Stats(); s.Calls != 4 || s.CacheHits != 0 {
		t.Fatalf("calls %d, cache hits %d; want 4 calls sent and no hit", s.Calls, s.CacheHits)
	}
}

// A client's own release drops its cached refusals of the call's keys at
// once, without waiting for the nodes' push (which may come after the next
// call: CI saw TestClientReleaseSameNode refused 7 ms after a release).
// The receipts a client gets carry only ids, so the keys are the call's.
func TestClientOwnReleaseDropsRefusals(t *testing.T) {
	tc := startCluster(t, 1, nil)
	c := dialCluster(t, tc, nil)
	client.IgnorePushes(c)
	ctx := limiter.WithRelease(context.Background())
	e := []limiter.Entry{{Key: "own", Limit: limiter.Limit{Uses: 2, Window: time.Hour}, Cost: 2}}
	v, err := c.ConsumeMany(ctx, e)
	if err != nil || !v.Allowed || v.Release == nil {
		t.Fatalf("consume: %+v %v; want allowed with a Release", v, err)
	}
	if r, err := c.PeekMany(ctx, e); err != nil || r.Allowed || r.RetryAfter <= 0 {
		t.Fatalf("peek before release: %+v %v; want refused with a wait (cached)", r, err)
	}
	if err := v.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hits := c.Stats().CacheHits
	if r, err := c.PeekMany(ctx, e); err != nil || !r.Allowed {
		t.Fatalf("peek after own release: %+v %v; want allowed", r, err)
	}
	if h := c.Stats().CacheHits; h != hits {
		t.Fatalf("cache hits %d -> %d; want the peek sent to the node", hits, h)
	}
}
