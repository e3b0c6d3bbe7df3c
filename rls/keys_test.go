package rls_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/rls"
)

// parseDomain parses one YAML domain into a Config.
func parseDomain(t *testing.T, yaml string) rls.Config {
	t.Helper()
	d, err := rls.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return rls.Config{Domains: []rls.Domain{d}}
}

// The current envoyproxy/ratelimit keys are read, not refused as unknown.
// (Checked: before, quota_mode, value_to_metric and share_threshold were
// each "unknown key"; renaming one in the parser fails this test.)
func TestCurrentKeysParse(t *testing.T) {
	cfg := parseDomain(t, `domain: d
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        quota_mode: true
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 60}
`)
	r := cfg.Domains[0].Descriptors[0]
	m := r.Descriptors[0]
	if !r.ShareThreshold || !r.ValueToMetric || !m.QuotaMode || !m.DetailedMetric {
		t.Fatalf("parsed %+v / %+v; want share_threshold, value_to_metric, quota_mode and detailed_metric set", r, m)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// Mistakes in the new keys and in replaces are refused at load, naming
// the field. (Checked: before, an unknown name in replaces loaded and
// silently never replaced anything.)
func TestCurrentKeysErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"replaces an unknown name", `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      requests_per_unit: 1
      name: a_limit
      replaces: [{name: a_limit_typo}]
  - key: b
    rate_limit: {unit: second, requests_per_unit: 1, name: b_limit}
`, `test.yaml: descriptors[0].rate_limit.replaces[0].name: no limit of domain "d" is named "a_limit_typo"`},
		{"replaces a name of another domain's only", `domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: x}]}
`, `descriptors[0].descriptors[0].rate_limit.replaces[0].name: no limit of domain "d" is named "x"`},
		{"share_threshold without a wildcard", "domain: d\ndescriptors:\n  - key: a\n    value: files\n    share_threshold: true\n", `descriptors[0].share_threshold: needs a wildcard value (one ending in "*"), got value "files"`},
		{"share_threshold without a value", "domain: d\ndescriptors:\n  - key: a\n    share_threshold: true\n", `descriptors[0].share_threshold: needs a wildcard value`},
		{"quota_mode not a bool", "domain: d\ndescriptors:\n  - key: a\n    quota_mode: maybe\n", `descriptors[0].quota_mode: must be true or false, got "maybe"`},
	}
	for _, c := range cases {
		d, err := rls.Parse("test.yaml", []byte(c.yaml))
		if err == nil {
			err = rls.Config{Domains: []rls.Domain{d}}.Validate()
		}
		var ce *rls.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a *ConfigError containing %q", c.name, err, c.want)
		}
	}
	// A name replaced across files of the same domain is not possible
	// (one domain per file), but a name in a sibling branch is known.
	if err := parseDomain(t, `domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1, name: deep}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: deep}]}
`).Validate(); err != nil {
		t.Fatalf("replaces of a nested limit's name: %v", err)
	}
}

// share_threshold: every value a wildcard matches counts in one counter;
// without it, each value counts on its own. (Checked: with the shared
// entries ignored, files/b gets a fresh counter and the test fails.)
func TestShareThreshold(t *testing.T) {
	e := newEnv(t, parseDomain(t, `domain: files
descriptors:
  - key: path
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    value: own/*
    rate_limit: {unit: hour, requests_per_unit: 3}
`))
	perHour := perUnit(3, hour)
	for i, p := range []string{"files/a.pdf", "files/b.csv", "files/c.txt"} {
		want(t, fmt.Sprintf("shared %d", i+1), e.call("files", 0, desc("path", p)).Statuses[0], ok, perHour, int64(2-i))
	}
	want(t, "shared: a fourth file", e.call("files", 0, desc("path", "files/d")).Statuses[0], over, perHour, 0)
	for range 3 {
		e.call("files", 0, desc("path", "own/a"))
	}
	want(t, "own/a full", e.call("files", 0, desc("path", "own/a")).Statuses[0], over, perHour, 0)
	want(t, "own/b counts apart", e.call("files", 0, desc("path", "own/b")).Statuses[0], ok, perHour, 2)
}

// quota_mode: a quota descriptor over its limit is OVER_LIMIT in its
// status, but turns the request OVER_LIMIT only when every quota
// descriptor is over; a plain descriptor over its limit always does.
// (Checked: with quota_mode ignored, the first case answers OVER_LIMIT.)
func TestQuotaMode(t *testing.T) {
	e := newEnv(t, parseDomain(t, `domain: q
descriptors:
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 1}
`))
	a, b, plain := desc("quota_a", "x"), desc("quota_b", "x"), desc("plain", "x")
	if r := e.call("q", 0, a, b); r.OverallCode != ok {
		t.Fatalf("both quotas within: %v", r.OverallCode)
	}
	r := e.call("q", 0, a, b)
	if r.OverallCode != ok || r.Statuses[0].GetCode() != over || r.Statuses[1].GetCode() != ok {
		t.Fatalf("quota a over, b within: overall %v statuses %v/%v; want OK with a OVER_LIMIT, b OK", r.OverallCode, r.Statuses[0].GetCode(), r.Statuses[1].GetCode())
	}
	if r := e.call("q", 0, a, b); r.OverallCode != over {
		t.Fatalf("every quota over: overall %v, want OVER_LIMIT", r.OverallCode)
	}
	if r := e.call("q", 0, a); r.OverallCode != over {
		t.Fatalf("the only quota over: overall %v, want OVER_LIMIT", r.OverallCode)
	}
	if r := e.call("q", 0, plain); r.OverallCode != ok {
		t.Fatalf("plain within: %v", r.OverallCode)
	}
	if r := e.call("q", 0, plain, desc("quota_b", "y")); r.OverallCode != over {
		t.Fatalf("plain over with a quota within: overall %v, want OVER_LIMIT", r.OverallCode)
	}
}
