package peer

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/owner"
)

// Receipts round-trip through the wire whole or lean: a lean one is
// completed from the call's entry at its index and the node asked, a
// whole one (an older owner's, or a hop's) keeps its own key, limit and
// node.
func TestReceiptsRoundTrip(t *testing.T) {
	lim := limiter.Limit{Uses: 5, Window: time.Minute}
	entries := []limiter.Entry{{Key: "a", Limit: lim}, {Key: "b", Limit: lim}}
	rs := []owner.Receipt{
		{Key: "a", Limit: lim, Cost: 1, ID: 7, AgeUs: 3, Node: "b", AtUs: 100},
		{Key: "b", Limit: lim, Cost: 1, ID: 8, AgeUs: 4, Node: "c", AtUs: 200}, // recorded one hop on
	}
	for _, c := range []struct {
		name string
		lean bool
	}{{"whole", false}, {"lean", true}} {
		wire := receiptsToPB(rs, entries, "b", c.lean)
		if c.lean && (wire[0].Key != nil || wire[0].Limit != nil || wire[0].Node != "" || wire[1].Node != "c") {
			t.Errorf("%s on the wire: %v; want no key, limit or node but c's", c.name, wire)
		}
		// The asker reads them against entries it did not send (a whole
		// receipt must not take them).
		other := []limiter.Entry{{Key: "x", Limit: lim}, {Key: "y", Limit: lim}}
		want := entries
		if c.lean {
			want = other
		}
		got := receiptsFromPB(wire, other, "b")
		for i := range rs {
			w := rs[i]
			w.Key = want[i].Key
			if got[i] != w {
				t.Errorf("%s receipt %d back as %+v, want %+v", c.name, i, got[i], w)
			}
		}
	}
	// Receipts that are not the entries' own, one each in order, go whole
	// even to a lean asker.
	if wire := receiptsToPB(rs[:1], entries, "b", true); wire[0].Key == nil || wire[0].Limit == nil {
		t.Errorf("one receipt for two entries went lean: %v", wire)
	}
	one := resultToPB(owner.Result{Verdict: limiter.Verdict{Allowed: true}, Receipts: rs[:1]}, entries[:1], "b", true)
	if len(one.Receipts) != 1 || one.Receipts[0].Key != nil || one.Receipts[0].Id != 7 || !one.Verdict.Allowed {
		t.Errorf("a one-receipt result: %v", one)
	}
}
