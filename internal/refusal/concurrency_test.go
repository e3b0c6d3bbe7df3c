package refusal

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// A concurrency limit's refusal is not kept: a release, not the TTL,
// usually ends it.
func TestConcurrencyRefusalNotKept(t *testing.T) {
	c := New(0)
	e := limiter.Entry{Key: "k", Limit: limiter.ConcurrencyLimit(2, time.Hour)}
	c.Put(&e, refused(time.Hour, 0), 0)
	if v, hit := c.Get(&e, 1); hit {
		t.Fatalf("a concurrency refusal was cached: %+v", v)
	}
	log := mkEntry("k", 1)
	c.Put(&log, refused(time.Minute, 0), 0)
	if _, hit := c.Get(&log, 1); !hit {
		t.Fatal("a sliding log's refusal was not cached")
	}
}
