package chaos

import (
	"testing"
	"time"
)

// The bucket checker on histories small enough to count by hand: a bucket
// of 2 refilled at 2 per second (and one of 3, its capacity apart).
func TestBucketOvershoot(t *testing.T) {
	ms := time.Millisecond
	at := func(from, to time.Duration) Call {
		return Call{Key: "k", Start: from, End: to, Answered: true, Allowed: true}
	}
	for _, c := range []struct {
		name       string
		calls      []Call
		max, total int
	}{
		{"the capacity at once", []Call{at(0, 0), at(0, 0)}, 0, 0},
		{"one past the capacity", []Call{at(0, 0), at(0, 0), at(0, 0)}, 1, 1},
		{"refilled one by 500 ms", []Call{at(0, 0), at(0, 0), at(500*ms, 500*ms)}, 0, 0},
		{"two at 500 ms: one too many", []Call{at(0, 0), at(0, 0), at(500*ms, 500*ms), at(500*ms, 500*ms)}, 1, 1},
		{"slow calls hide, never invent", []Call{at(0, 0), at(0, 0), at(0, 600*ms)}, 0, 0},
		{"steady at the rate", []Call{at(0, 0), at(0, 0), at(500*ms, 500*ms), at(time.Second, time.Second), at(1500*ms, 1500*ms)}, 0, 0},
	} {
		ko := keyBucketOvershoot(c.calls, 2, 2, time.Second)
		if ko.Max != c.max || ko.Total != c.total {
			t.Errorf("%s: Max %d, Total %d; want %d, %d", c.name, ko.Max, ko.Total, c.max, c.total)
		}
	}
	if ko := keyBucketOvershoot([]Call{at(0, 0), at(0, 0), at(0, 0)}, 3, 2, time.Second); ko.Max != 0 {
		t.Errorf("3 at once from a bucket of capacity 3: Max %d, want 0", ko.Max)
	}
}
