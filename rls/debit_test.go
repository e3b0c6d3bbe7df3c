package rls_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rls"
)

const llmYAML = `domain: llm
descriptors:
  - key: team
    debit: true
    rate_limit:
      unit: minute
      requests_per_unit: 1000
`

// A rule with debit: true counts a descriptor's hits_addend as usage
// after the fact: an LLM gateway looks with 0 hits before the request and
// debits the response's tokens after it.
func TestDebitRule(t *testing.T) {
	d, err := rls.Parse("llm.yaml", []byte(llmYAML))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, rls.Config{Domains: []rls.Domain{d}})
	lim := perUnit(1000, minute)
	team := desc("team", "a")
	look := desc("team", "a")
	look.HitsAddend = wrapperspb.UInt64(0) // Envoy's per-descriptor hits: 0 is a look
	want(t, "a look before the first request", e.call("llm", 0, look).Statuses[0], ok, lim, 1000)
	// 1500 tokens of 1000: counted, OK (the budget was not exceeded yet).
	want(t, "a debit of 1500", e.call("llm", 1500, team).Statuses[0], ok, lim, 0)
	want(t, "a look after it", e.call("llm", 0, look).Statuses[0], over, lim, 0)
	r := e.call("llm", 10, team)
	want(t, "a debit once exceeded", r.Statuses[0], over, lim, 0)
	if r.OverallCode != over {
		t.Fatalf("a debit once exceeded: overall %v, want OVER_LIMIT", r.OverallCode)
	}
	// The next minute starts whole (fixed windows, as envoy counts).
	e.clock.Advance(time.Minute)
	want(t, "a look in the next minute", e.call("llm", 0, look).Statuses[0], ok, lim, 1000)
	// Without debit: true a request of 1500 hits cannot fit and is not counted.
	plain, err := rls.Parse("plain.yaml", []byte("domain: plain\ndescriptors:\n  - key: team\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1000\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := newEnv(t, rls.Config{Domains: []rls.Domain{plain}})
	want(t, "1500 hits on a plain rule", p.call("plain", 1500, team).Statuses[0], over, lim, 0)
	want(t, "a look after them", p.call("plain", 0, look).Statuses[0], ok, lim, 1000)
}

// debit needs a rate_limit on its rule, and is true or false.
func TestDebitRuleConfig(t *testing.T) {
	for _, c := range []struct{ yaml, path string }{
		{"domain: x\ndescriptors:\n  - key: team\n    debit: true\n", "descriptors[0].debit"},
		{"domain: x\ndescriptors:\n  - key: team\n    debit: maybe\n    rate_limit: {unit: minute, requests_per_unit: 1}\n", "descriptors[0].debit"},
	} {
		d, err := rls.Parse("x.yaml", []byte(c.yaml))
		if err == nil {
			err = rls.Config{Domains: []rls.Domain{d}}.Validate()
		}
		var ce *rls.ConfigError
		if !errors.As(err, &ce) || ce.Path != c.path || !errors.Is(err, limiter.ErrInvalid) {
			t.Errorf("%q: %v, want a ConfigError on %s", c.yaml, err, c.path)
		}
	}
}
