package ringlimit_test

import (
	"net/http"
	"testing"
)

// Over JSON, a concurrency limit's slot is taken with "release": true
// and given back with POST /v1/release and its release_id, across the
// cluster (the key is owned by the other node); a second release of one
// id gives back nothing more.
func TestJSONConcurrency(t *testing.T) {
	tc := startCluster(t, 2, nil)
	n0, n1 := tc.nodes[0], tc.nodes[1]
	waitRingsAgree(t, tc)
	base := "http://" + n0.HTTPAddr()
	k := `"` + keyOwnedBy(t, n0, n1.Name(), "jobs") + `"`
	acquire := `{"entries":[{"key":` + k + `,"limit":"concurrency:2/1h"}],"release":true}`
	first := postJSON(t, base+"/v1/consume", acquire).verdict(t, "first slot")
	second := postJSON(t, base+"/v1/consume", acquire).verdict(t, "second slot")
	if !first.Allowed || !second.Allowed || first.ReleaseID == "" || second.ReleaseID == "" || first.ReleaseID == second.ReleaseID {
		t.Fatalf("two slots of 2: %+v, %+v; want both allowed with their own release_id", first, second)
	}
	third := postJSON(t, base+"/v1/consume", acquire).verdict(t, "third slot")
	if third.Allowed || third.ReleaseID != "" || third.RetryAfterMs < 3_500_000 {
		t.Fatalf("a third slot of 2: %+v; want refused for up to the 1h TTL, no release_id", third)
	}
	release := `{"release_id":"` + first.ReleaseID + `"}`
	for range 2 { // twice: the second gives back nothing more
		if a := postJSON(t, base+"/v1/release", release); a.code != http.StatusOK {
			t.Fatalf("release: %d %s", a.code, a.body)
		}
	}
	if v := postJSON(t, base+"/v1/consume", acquire).verdict(t, "after a release"); !v.Allowed {
		t.Fatalf("a slot after a release: %+v, want allowed", v)
	}
	if v := postJSON(t, base+"/v1/consume", acquire).verdict(t, "full again"); v.Allowed {
		t.Fatalf("a release given twice freed two slots: %+v", v)
	}
	// Without "release" no id is given.
	if v := postJSON(t, base+"/v1/consume", entryBody(`"other"`, "concurrency:2/1h")).verdict(t, "no release asked"); !v.Allowed || v.ReleaseID != "" {
		t.Fatalf("a consume without release: %+v, want allowed without a release_id", v)
	}
	postJSON(t, base+"/v1/release", `{"release_id":"x1"}`).problem(t, "a bad id", http.StatusBadRequest, "release_id")
	postJSON(t, base+"/v1/consume", `{"entries":[{"key":"d","limit":"concurrency:2/1h","debit":true}]}`).problem(t, "a debit on slots", http.StatusBadRequest, "entries[0].debit")
}
