package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/rls"
)

// --envoy-response-headers and --max-descriptors reach the Envoy
// service's Config, from flags and from their environment variables;
// their defaults are envoy ratelimit's (off) and rls's (64).
func TestEnvoyOptions(t *testing.T) {
	const dir = "../../rls/testdata/envoy"
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		headers bool
		max     int
	}{
		{"defaults", []string{"--envoy-config", dir}, nil, false, rls.DefaultMaxDescriptors},
		{"flags", []string{"--envoy-config", dir, "--envoy-response-headers", "--max-descriptors", "5"}, nil, true, 5},
		{"environment", []string{"--envoy-config", dir}, map[string]string{"RINGLIMIT_ENVOY_RESPONSE_HEADERS": "true", "RINGLIMIT_MAX_DESCRIPTORS": "7"}, true, 7},
	}
	for _, c := range cases {
		o, err := parseServe(t, c.args, c.env)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		cfg, err := o.nodeConfig(nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.Envoy == nil || cfg.Envoy.ResponseHeaders != c.headers || cfg.Envoy.MaxDescriptors != c.max {
			t.Fatalf("%s: Envoy config %+v; want ResponseHeaders %v, MaxDescriptors %d", c.name, cfg.Envoy, c.headers, c.max)
		}
	}
	o, err := parseServe(t, []string{"--max-descriptors", "0"}, nil)
	if err == nil {
		_, err = o.nodeConfig(nil)
	}
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--max-descriptors") {
		t.Fatalf("--max-descriptors 0: %v; want a usage error naming it", err)
	}
}
