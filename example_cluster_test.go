package ringlimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/examples/http/api"
)

// The example API behind three nodes of one cluster: a client's login
// attempts entering through different nodes share one limit (5 per 15
// minutes), and the per-API-key quota is shared the same way.
func TestExampleAPIOnCluster(t *testing.T) {
	tc := startCluster(t, 3, nil)
	var servers []*httptest.Server
	for _, n := range tc.nodes {
		srv := httptest.NewServer(api.NewHandler(n))
		t.Cleanup(srv.Close)
		servers = append(servers, srv)
	}
	post := func(i int) int {
		t.Helper()
		resp, err := http.Post(servers[i%3].URL+"/login", "application/json", strings.NewReader(`{"user":"alice"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var codes []int
	for i := 0; i < 9; i++ {
		codes = append(codes, post(i))
	}
	ok, limited := 0, 0
	for _, c := range codes {
		switch c {
		case http.StatusTooManyRequests:
			limited++
		case http.StatusOK, http.StatusUnauthorized, http.StatusNoContent:
			ok++
		default:
			t.Fatalf("login answered %d", c)
		}
	}
	if ok != 5 || limited != 4 || codes[5] != http.StatusTooManyRequests {
		t.Fatalf("9 logins through 3 nodes answered %v: want the first 5 through, then 429 (one shared limit)", codes)
	}
	// The health route is exempt, whichever node answers.
	for i := 0; i < 6; i++ {
		resp, err := http.Get(servers[i%3].URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("healthz through node %d: %d", i%3, resp.StatusCode)
		}
	}
}
