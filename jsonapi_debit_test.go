package ringlimit_test

import (
	"net/http"
	"testing"
)

// Over JSON, "debit" records usage after the fact and a token bucket's
// burst rides in the limit's text; both reach the key's owner across the
// cluster (the key is owned by the other node, so the call is forwarded
// over gRPC).
func TestJSONDebitAndBurst(t *testing.T) {
	tc := startCluster(t, 2, nil)
	n0, n1 := tc.nodes[0], tc.nodes[1]
	tc.waitMembers(2)
	url := "http://" + n0.HTTPAddr() + "/v1/consume"
	k := `"` + keyOwnedBy(t, n0, n1.Name(), "llm") + `"`
	debit := func(cost string) string {
		return `{"entries":[{"key":` + k + `,"limit":"fixed-window:1000/1h","cost":` + cost + `,"debit":true}]}`
	}
	if v := postJSON(t, url, debit("1500")).verdict(t, "a debit of 1500 of 1000"); !v.Allowed || v.Remaining != 0 {
		t.Fatalf("a debit of 1500 on a fresh budget of 1000: %+v, want allowed (not exceeded before), 0 left", v)
	}
	if v := postJSON(t, url, debit("1")).verdict(t, "a debit past the budget"); v.Allowed || v.RetryAfterMs <= 0 {
		t.Fatalf("a debit once 1500 of 1000 were used: %+v, want refused with a wait", v)
	}
	if v := postJSON(t, url, entryBody(k, "fixed-window:1000/1h")).verdict(t, "a use after the debits"); v.Allowed {
		t.Fatalf("a use after the debits: %+v, want refused", v)
	}
	// A debit and a consume in one batch is bad input naming the field.
	mixed := `{"entries":[{"key":"a","limit":"5/1m","debit":true},{"key":"b","limit":"5/1m"}]}`
	postJSON(t, url, mixed).problem(t, "a mixed batch", http.StatusBadRequest, "entries[1].debit")

	b := `"` + keyOwnedBy(t, n0, n1.Name(), "burst") + `"`
	burst := func(cost string) string {
		return `{"entries":[{"key":` + b + `,"limit":"token-bucket:1/1h,burst=5","cost":` + cost + `}]}`
	}
	if v := postJSON(t, url, burst("5")).verdict(t, "the whole burst"); !v.Allowed || v.Remaining != 0 {
		t.Fatalf("5 of a burst of 5 at 1 an hour: %+v, want allowed, 0 left", v)
	}
	if v := postJSON(t, url, burst("1")).verdict(t, "past the burst"); v.Allowed || v.RetryAfterMs < 3_500_000 {
		t.Fatalf("one more: %+v, want refused for about an hour (one use an hour)", v)
	}
	postJSON(t, url, `{"entries":[{"key":"x","limit":"5/1m,burst=3"}]}`).problem(t, "a burst on a sliding log", http.StatusBadRequest, "entries[0].burst")
}
