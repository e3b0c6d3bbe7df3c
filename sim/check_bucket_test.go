package sim

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/chaos"
)

// The bucket checker on histories small enough to count by hand: a bucket
// of 2 refilled at 2 per second.
func TestBucketOvershoot(t *testing.T) {
	ms := time.Millisecond
	at := func(from, to time.Duration) chaos.Call {
		return chaos.Call{Key: "k", Start: from, End: to, Answered: true, Allowed: true}
	}
	for _, c := range []struct {
		name       string
		calls      []chaos.Call
		max, total int
	}{
		{"the capacity at once", []chaos.Call{at(0, 0), at(0, 0)}, 0, 0},
		{"one past the capacity", []chaos.Call{at(0, 0), at(0, 0), at(0, 0)}, 1, 1},
		{"refilled one by 500 ms", []chaos.Call{at(0, 0), at(0, 0), at(500*ms, 500*ms)}, 0, 0},
		{"two at 500 ms: one too many", []chaos.Call{at(0, 0), at(0, 0), at(500*ms, 500*ms), at(500*ms, 500*ms)}, 1, 1},
		{"slow calls hide, never invent", []chaos.Call{at(0, 0), at(0, 0), at(0, 600*ms)}, 0, 0},
		{"steady at the rate", []chaos.Call{at(0, 0), at(0, 0), at(500*ms, 500*ms), at(time.Second, time.Second), at(1500*ms, 1500*ms)}, 0, 0},
	} {
		ko := keyBucketOvershoot(c.calls, 2, time.Second)
		if ko.Max != c.max || ko.Total != c.total {
			t.Errorf("%s: Max %d, Total %d; want %d, %d", c.name, ko.Max, ko.Total, c.max, c.total)
		}
	}
}
