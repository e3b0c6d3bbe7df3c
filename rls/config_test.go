package rls_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rls"
)

func TestLoadExamples(t *testing.T) {
	cfg := loadExamples(t)
	var names []string
	for _, d := range cfg.Domains {
		names = append(names, d.Name)
	}
	want := "edge_proxy_per_ip example4 example6 example7 example8 example9 internal messaging mongo_cps rl"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("domains %q, want %q (files in name order)", got, want)
	}
	rl := cfg.Domains[len(cfg.Domains)-1]
	foo := rl.Descriptors[1]
	if foo.Key != "foo" || foo.Value != "" || foo.RateLimit.RequestsPerUnit != 2 || foo.RateLimit.Unit != "minute" || len(foo.Descriptors) != 5 {
		t.Fatalf("rl foo = %+v", foo)
	}
	if shady := foo.Descriptors[4]; shady.Value != "shady" || !shady.ShadowMode {
		t.Fatalf("rl foo.baz=shady = %+v", shady)
	}
	if bay := foo.Descriptors[3]; !bay.RateLimit.Unlimited {
		t.Fatalf("rl foo.bay = %+v", bay)
	}
	// A list of files works the same.
	two, err := rls.Load("testdata/envoy/rl.yaml", "testdata/envoy/messaging.yaml")
	if err != nil || len(two.Domains) != 2 || two.Domains[1].Name != "messaging" {
		t.Fatalf("Load(two files) = %+v, %v", two.Domains, err)
	}
}

// Every mistake is a *ConfigError naming the file, the line and the field.
func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"empty file", "", "x.yaml: domain: must not be empty"},
		{"no domain", "descriptors: []\n", "x.yaml:1: domain: must not be empty"},
		{"not a map", "- a\n- b\n", "x.yaml:1: must be a map"},
		{"a list of domains", "- domain: a\n  descriptors: []\n- domain: b\n", "x.yaml:1: must be a map (domain, descriptors), not a YAML list: one domain per file"},
		{"a scalar", "edge\n", "x.yaml:1: must be a map"},
		{"not yaml", "domain: [\n", "x.yaml: not YAML"},
		{"unknown top key", "domain: d\nlimits: []\n", "x.yaml:2: limits: unknown key (want one of descriptors, domain)"},
		{"unknown descriptor key", "domain: d\ndescriptors:\n  - key: a\n    vaule: b\n", "x.yaml:4: descriptors[0].vaule: unknown key"},
		{"empty key", "domain: d\ndescriptors:\n  - value: b\n", "x.yaml:3: descriptors[0].key: must not be empty"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", `x.yaml:5: descriptors[0].rate_limit.unit: unknown unit "fortnight"`},
		{"missing unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1\n", `x.yaml:5: descriptors[0].rate_limit.unit: unknown unit ""`},
		{"negative", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n", `x.yaml:6: descriptors[0].rate_limit.requests_per_unit: must be a whole number from 0 to 4294967295, got "-1"`},
		{"text count", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: ten\n", `descriptors[0].rate_limit.requests_per_unit: must be a whole number`},
		{"bad bool", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: sometimes\n", `x.yaml:4: descriptors[0].shadow_mode: must be true or false, got "sometimes"`},
		{"repeated key", "domain: d\ndomain: e\n", "x.yaml:2: domain: repeated key"},
		{"descriptors not a list", "domain: d\ndescriptors:\n  key: a\n", "x.yaml:3: descriptors: must be a list"},
		{"nested unknown", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit:\n          unit: second\n          per_unit: 3\n", "x.yaml:8: descriptors[0].descriptors[0].rate_limit.per_unit: unknown key"},
		{"empty replaces name", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n", "x.yaml:8: descriptors[0].rate_limit.replaces[0].name: must not be empty"},
	}
	for _, c := range cases {
		_, err := rls.Parse("x.yaml", []byte(c.yaml))
		var ce *rls.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, limiter.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Parse error %v, want a *ConfigError containing %q", c.name, err, c.want)
		}
	}
}

// Mistakes only the whole configuration shows: checked by Load, New and
// Validate.
func TestConfigValidate(t *testing.T) {
	write := func(dir, name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dir := t.TempDir()
	a := write(dir, "a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	b := write(dir, "b.yml", "domain: d\n")
	write(dir, ".hidden.yaml", "not: [valid\n")
	write(dir, "notes.txt", "ignored")
	cases := []struct {
		name string
		load func() error
		want string
	}{
		{"duplicate domain", func() error { _, err := rls.Load(dir); return err }, `b.yml: domain: duplicate domain "d" (also in ` + a + `)`},
		{"missing file", func() error { _, err := rls.Load(filepath.Join(dir, "nope.yaml")); return err }, "nope.yaml: stat"},
		{"empty dir", func() error { _, err := rls.Load(t.TempDir()); return err }, "directory holds no .yaml or .yml file"},
		{"nothing", func() error { _, err := rls.Load(); return err }, "no configuration file given"},
		{"duplicate rule", func() error {
			_, err := rls.Load(write(t.TempDir(), "dup.yaml", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n"))
			return err
		}, `dup.yaml: descriptors[1]: duplicate rule for key "k" value "v" (also descriptors[0])`},
		{"unlimited with unit", func() error {
			_, err := rls.Load(write(t.TempDir(), "u.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n"))
			return err
		}, "u.yaml: descriptors[0].rate_limit.unit: must not be set when unlimited is true"},
		{"replaces itself", func() error {
			return rls.Config{Domains: []rls.Domain{{Name: "d", Descriptors: []rls.Descriptor{{Key: "k", RateLimit: &rls.RateLimit{Unit: "second", RequestsPerUnit: 1, Name: "n", Replaces: []string{"n"}}}}}}}.Validate()
		}, "Domains[0]: descriptors[0].rate_limit.replaces[0].name: a limit cannot replace itself"},
		{"go-built empty name", func() error { return rls.Config{Domains: []rls.Domain{{}}}.Validate() }, "Domains[0]: domain: must not be empty"},
		{"algorithm", func() error { return rls.Config{Algorithm: "fixed-windows"}.Validate() }, "Algorithm:"},
		{"concurrency", func() error { return rls.Config{Algorithm: "concurrency"}.Validate() }, "Algorithm: concurrency is not supported"},
		{"nil store", func() error { _, err := rls.New(nil, rls.Config{}); return err }, "store: must not be nil"},
	}
	for _, c := range cases {
		err := c.load()
		var ce *rls.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a *ConfigError containing %q", c.name, err, c.want)
		}
	}
	if _, err := rls.Load(a); err != nil {
		t.Fatalf("Load(a.yaml): %v", err)
	}
	if _, err := rls.Load(b); err != nil {
		t.Fatalf("Load(b.yml): %v", err)
	}
}
