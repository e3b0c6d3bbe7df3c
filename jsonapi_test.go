package ringlimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
)

// jsonAnswer is one answer of the JSON API.
type jsonAnswer struct {
	code   int
	header http.Header
	body   string
}

func postJSON(t *testing.T, url, body string) jsonAnswer {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return jsonAnswer{resp.StatusCode, resp.Header, string(b)}
}

// verdict decodes a 200 answer's verdict, failing on any other.
func (a jsonAnswer) verdict(t *testing.T, what string) ringlimit.JSONVerdict {
	t.Helper()
	if a.code != http.StatusOK {
		t.Fatalf("%s: %d %s, want 200", what, a.code, a.body)
	}
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q, want application/json", what, ct)
	}
	var v ringlimit.JSONVerdict
	if err := json.Unmarshal([]byte(a.body), &v); err != nil {
		t.Fatalf("%s: %v in %s", what, err, a.body)
	}
	return v
}

type problemBody struct {
	Type, Title, Detail, Instance, Field string
	Status                               int
	CorrelationID                        string `json:"correlation_id"`
}

// problem checks that a is an RFC 9457 problem with status code naming
// field, and returns it.
func (a jsonAnswer) problem(t *testing.T, what string, code int, field string) problemBody {
	t.Helper()
	var p problemBody
	if a.code != code {
		t.Errorf("%s: %d %s, want %d", what, a.code, a.body, code)
		return p
	}
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json; charset=utf-8" {
		t.Errorf("%s: Content-Type %q, want application/problem+json; charset=utf-8", what, ct)
	}
	if err := json.Unmarshal([]byte(a.body), &p); err != nil {
		t.Errorf("%s: %v in %s", what, err, a.body)
		return p
	}
	if p.Status != code || p.Type != "about:blank" || p.Title != http.StatusText(code) || p.Field != field || !strings.HasPrefix(p.Instance, "/v1/") || p.Detail == "" {
		t.Errorf("%s: problem %+v, want status %d naming field %q", what, p, code, field)
	}
	return p
}

func entryBody(key, limit string) string {
	return `{"entries":[{"key":` + key + `,"limit":"` + limit + `"}]}`
}

// A body past --max-body-bytes gets 413 naming body; one at the bound is
// served. Without the bound's own check the answer was a 400.
func TestJSONBodyBound(t *testing.T) {
	for _, c := range []struct {
		name  string
		bound int64 // Config.MaxBodyBytes; 0: the default
	}{{"default 1 MiB", 0}, {"configured 300 bytes", 300}} {
		t.Run(c.name, func(t *testing.T) {
			tc := startCluster(t, 1, func(cfg *ringlimit.Config) { cfg.MaxBodyBytes = c.bound })
			url := "http://" + tc.nodes[0].HTTPAddr() + "/v1/consume"
			limit := c.bound
			if limit == 0 {
				limit = ringlimit.DefaultMaxBodyBytes
			}
			body := entryBody(`"big"`, "5/1m")
			// White space before the object keeps the JSON valid at any size.
			at := strings.Repeat(" ", int(limit)-len(body)) + body
			if v := postJSON(t, url, at).verdict(t, "a body at the bound"); !v.Allowed || v.Remaining != 4 {
				t.Errorf("a body of exactly %d bytes: %+v, want allowed with 4 left", limit, v)
			}
			p := postJSON(t, url, " "+at).problem(t, "a body one byte past the bound", http.StatusRequestEntityTooLarge, "body")
			if !strings.Contains(p.Detail, strconv.FormatInt(limit, 10)) {
				t.Errorf("413 detail %q does not name the bound %d", p.Detail, limit)
			}
		})
	}
}

// Data after the JSON object is a 400 and counts nothing; white space
// after it is fine.
func TestJSONTrailingData(t *testing.T) {
	tc := startCluster(t, 1, nil)
	base := "http://" + tc.nodes[0].HTTPAddr()
	body := entryBody(`"trail"`, "5/1m")
	for _, tail := range []string{" xxx", "{}", body, "]", "\x00"} {
		for _, path := range []string{"/v1/consume", "/v1/peek"} {
			postJSON(t, base+path, body+tail).problem(t, fmt.Sprintf("%s with %q after the object", path, tail), http.StatusBadRequest, "body")
		}
	}
	// None of those was counted: the first real call leaves 4.
	if v := postJSON(t, base+"/v1/consume", body+" \r\n\t").verdict(t, "white space after the object"); v.Remaining != 4 {
		t.Errorf("after refused bodies with trailing data, a consume left %d, want 4 (a trailing-data body was counted)", v.Remaining)
	}
}

// Keys are JSON strings of Unicode characters. Invalid UTF-8 bytes and
// lone surrogates are refused, naming the entry's key; before, each became
// U+FFFD and all of them shared the counter of "coll\ufffd".
func TestJSONKeyUnicode(t *testing.T) {
	tc := startCluster(t, 1, nil)
	base := "http://" + tc.nodes[0].HTTPAddr()
	for _, key := range []string{
		"\"coll\xff\"", "\"coll\xfe\"", "\"coll\xc3\"", "\"\xed\xa0\x80\"", // raw bytes: not UTF-8 (the last is an encoded surrogate)
		`"coll\ud800"`, `"coll\udc00"`, `"coll\ud800x"`, `"coll\ud800\u0041"`, `"\udfff\ud800"`, `"coll\uD800"`, // lone surrogates
		`5`, `null`, `["a"]`, // not strings
	} {
		body := `{"entries":[{"key":"ok","limit":"5/1m"},{"key":` + key + `,"limit":"5/1m"}]}`
		postJSON(t, base+"/v1/consume", body).problem(t, "key "+key, http.StatusBadRequest, "entries[1].key")
	}
	// The refused keys counted nothing, so U+FFFD's own counter is
	// untouched; its two spellings are one JSON string, so one key.
	if v := postJSON(t, base+"/v1/consume", entryBody(`"coll\ufffd"`, "5/1m")).verdict(t, `"coll\ufffd"`); !v.Allowed || v.Remaining != 4 {
		t.Errorf(`"coll\ufffd" after the refused keys: %+v, want allowed with 4 left (a refused key was counted)`, v)
	}
	if v := postJSON(t, base+"/v1/consume", entryBody("\"coll\xef\xbf\xbd\"", "5/1m")).verdict(t, "raw U+FFFD"); v.Remaining != 3 {
		t.Errorf("raw U+FFFD after \\ufffd: %d left, want 3 (the same key)", v.Remaining)
	}
	// A surrogate pair is one character, the same key as its raw UTF-8.
	postJSON(t, base+"/v1/consume", entryBody(`"emoji\ud83d\ude00"`, "5/1m")).verdict(t, "a surrogate pair")
	if v := postJSON(t, base+"/v1/consume", entryBody(`"emoji😀"`, "5/1m")).verdict(t, "raw emoji"); v.Remaining != 3 {
		t.Errorf("raw U+1F600 after its escaped pair: %d left, want 3", v.Remaining)
	}
}

var (
	policyRE    = regexp.MustCompile(`^"entries\[0\]";q=2;w=60$`)
	rateLimitRE = regexp.MustCompile(`^"entries\[0\]";r=(\d+);t=(\d+)$`)
)

// A refusal is an answer: 200 with "allowed": false. Every decision has
// the draft RateLimit headers, a refusal Retry-After too. Before, a
// refusal was a 429 with neither.
func TestJSONDecisionHeaders(t *testing.T) {
	tc := startCluster(t, 1, nil)
	base := "http://" + tc.nodes[0].HTTPAddr()
	body := entryBody(`"hdr"`, "2/1m")
	check := func(what string, a jsonAnswer, allowed bool, remaining int64) {
		t.Helper()
		v := a.verdict(t, what)
		if v.Allowed != allowed || v.Remaining != remaining {
			t.Errorf("%s: %+v, want allowed=%v remaining=%d", what, v, allowed, remaining)
		}
		if p := a.header.Get("RateLimit-Policy"); !policyRE.MatchString(p) {
			t.Errorf("%s: RateLimit-Policy %q, want %s", what, p, policyRE)
		}
		m := rateLimitRE.FindStringSubmatch(a.header.Get("RateLimit"))
		if m == nil {
			t.Fatalf("%s: RateLimit %q, want %s", what, a.header.Get("RateLimit"), rateLimitRE)
		}
		r, _ := strconv.ParseInt(m[1], 10, 64)
		reset, _ := strconv.Atoi(m[2])
		if r != max(remaining, 0) || reset < 1 || reset > 61 {
			t.Errorf("%s: RateLimit %q, want r=%d and t in 1..61", what, m[0], remaining)
		}
		ra := a.header.Get("Retry-After")
		if allowed {
			if ra != "" {
				t.Errorf("%s: Retry-After %q on an allowed call", what, ra)
			}
			return
		}
		// Whole seconds, rounded up, of the verdict's own wait (61 for a
		// 1m window when the verdict rounded its µs up to 60001 ms).
		want := (v.RetryAfterMs + 999) / 1000
		if got, err := strconv.ParseInt(ra, 10, 64); err != nil || got != want || got < 1 || got > 61 || strconv.Itoa(reset) != ra {
			t.Errorf("%s: Retry-After %q (RateLimit t=%d), want %d from retry_after_ms %d", what, ra, reset, want, v.RetryAfterMs)
		}
	}
	check("peek before any use (what a consume would leave)", postJSON(t, base+"/v1/peek", body), true, 1)
	check("1st consume", postJSON(t, base+"/v1/consume", body), true, 1)
	check("2nd consume", postJSON(t, base+"/v1/consume", body), true, 0)
	check("3rd consume (refused)", postJSON(t, base+"/v1/consume", body), false, 0)
	check("peek when full", postJSON(t, base+"/v1/peek", body), false, 0)

	// A batch lists each entry's policy; each gets the batch's figures.
	a := postJSON(t, base+"/v1/consume", `{"entries":[{"key":"b1","limit":"5/1m"},{"key":"b2","limit":"token-bucket:100/1500ms"}]}`)
	a.verdict(t, "a batch of two")
	if p := a.header.Get("RateLimit-Policy"); p != `"entries[0]";q=5;w=60, "entries[1]";q=100;w=2` {
		t.Errorf("batch RateLimit-Policy %q", p)
	}
	if rl := a.header.Get("RateLimit"); !regexp.MustCompile(`^"entries\[0\]";r=4;t=\d+, "entries\[1\]";r=4;t=\d+$`).MatchString(rl) {
		t.Errorf("batch RateLimit %q, want both entries with the batch's r=4", rl)
	}

	// Errors keep their 4xx, with a problem body and no decision headers.
	for _, c := range []struct {
		body, field string
		code        int
	}{
		{entryBody(`""`, "5/1m"), "entries[0].key", 400},
		{entryBody(`"a"`, "five"), "entries[0].limit", 400},
		{`{"entries":[]}`, "entries", 400},
		{`{"entries":[{"key":"a","limit":"5/1m","color":"red"}]}`, "body", 400},
		{`{"entries":`, "body", 400},
		{entryBody(`"`+strings.Repeat("k", 1025)+`"`, "5/1m"), "entries[0].key", 413},
	} {
		a := postJSON(t, base+"/v1/consume", c.body)
		a.problem(t, c.body, c.code, c.field)
		if a.header.Get("RateLimit") != "" || a.header.Get("Retry-After") != "" {
			t.Errorf("%s: an error with decision headers %v", c.body, a.header)
		}
	}
}

// A refusal the deny policy made (the owner did not answer) is an outage,
// not a decision: 503 with a problem body and the failure's correlation
// id, as the middleware answers. The owner is frozen (its gRPC traffic
// held, its gossip alive, so it stays the owner), which no scheduling
// delay can undo.
func TestJSONDenyPolicyIs503(t *testing.T) {
	tc, holes := behindBlackholes(t, 2, func(c *ringlimit.Config) {
		c.Fallback, c.FallbackSet, c.Timeout, c.Replicas = fallback.Deny, true, 300*time.Millisecond, -1
	})
	n0, n1 := tc.nodes[0], tc.nodes[1]
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("deny-%d", i); mustOwner(t, n0, k) == n1.Name() {
			key = k
		}
	}
	// The router takes a new ring only once its hand-off is set up, a
	// little after the cluster's (which Owner reads): wait until n0 sends
	// the key's calls to n1 rather than counting them itself.
	waitFor(t, "node-0 to forward the key to node-1", func() bool {
		before := n0.Peers().Stats().Calls.Load()
		if _, err := n0.PeekMany(context.Background(), []limiter.Entry{{Key: key, Limit: limiter.Limit{Uses: 5, Window: time.Minute}}}); err != nil {
			t.Fatal(err)
		}
		return n0.Peers().Stats().Calls.Load() > before
	})
	holes[1].frozen.Store(true)
	a := postJSON(t, "http://"+n0.HTTPAddr()+"/v1/consume", entryBody(strconv.Quote(key), "5/1m"))
	p := a.problem(t, "a key of a frozen owner, deny policy", http.StatusServiceUnavailable, "")
	if p.CorrelationID == "" {
		t.Errorf("503 of the deny policy without its correlation id: %s", a.body)
	}
	holes[1].frozen.Store(false) // let the nodes close as usual
}

func mustOwner(t *testing.T, n *ringlimit.Node, key string) string {
	t.Helper()
	o, err := n.Owner(key)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// The HTTP port's refusal of a caller without the token is a problem body
// too, like every other error of the JSON API (it was {"error": ...}).
func TestJSONUnauthorizedIsProblem(t *testing.T) {
	tc := startCluster(t, 1, func(c *ringlimit.Config) { c.Security.AuthToken = "s3cret" })
	url := "http://" + tc.nodes[0].HTTPAddr() + "/v1/consume"
	postJSON(t, url, entryBody(`"a"`, "5/1m")).problem(t, "no token", http.StatusUnauthorized, "")
	req, _ := http.NewRequest("POST", url, strings.NewReader(entryBody(`"a"`, "5/1m")))
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("with the token: %d, want 200", resp.StatusCode)
	}
}

// A negative MaxBodyBytes is a configuration error naming the field.
func TestConfigMaxBodyBytesNegative(t *testing.T) {
	cfg := nodeConfig("neg")
	cfg.MaxBodyBytes = -1
	n, err := ringlimit.Start(context.Background(), cfg)
	var ie *limiter.InputError
	if !errors.As(err, &ie) || ie.Field != "MaxBodyBytes" {
		if n != nil {
			n.Close(context.Background())
		}
		t.Fatalf("Start with MaxBodyBytes -1: %v, want an input error naming MaxBodyBytes", err)
	}
}
