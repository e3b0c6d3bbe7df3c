package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit"
)

// --max-body-bytes and --grpc-reflection reach the node's Config, from the
// command line and from their environment variables.
func TestServeAPIFlags(t *testing.T) {
	for _, c := range []struct {
		name     string
		args     []string
		env      map[string]string
		body     int64
		noReflex bool
	}{
		{"defaults", nil, nil, ringlimit.DefaultMaxBodyBytes, false},
		{"flags", []string{"--max-body-bytes", "4096", "--grpc-reflection=false"}, nil, 4096, true},
		{"environment", nil, map[string]string{"RINGLIMIT_MAX_BODY_BYTES": "2048", "RINGLIMIT_GRPC_REFLECTION": "false"}, 2048, true},
		{"flag over environment", []string{"--grpc-reflection"}, map[string]string{"RINGLIMIT_GRPC_REFLECTION": "false"}, ringlimit.DefaultMaxBodyBytes, false},
	} {
		o, err := parseServe(t, c.args, c.env)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		cfg, err := o.nodeConfig(nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.MaxBodyBytes != c.body || cfg.NoGRPCReflection != c.noReflex {
			t.Errorf("%s: MaxBodyBytes %d NoGRPCReflection %v, want %d %v", c.name, cfg.MaxBodyBytes, cfg.NoGRPCReflection, c.body, c.noReflex)
		}
	}
	for _, args := range [][]string{{"--max-body-bytes", "0"}, {"--max-body-bytes", "-1"}, {"--grpc-reflection=maybe"}} {
		o, err := parseServe(t, args, nil)
		if err == nil {
			_, err = o.nodeConfig(nil)
		}
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), strings.SplitN(strings.TrimPrefix(args[0], "--"), "=", 2)[0]) {
			t.Errorf("%q: %v, want a usage error naming the flag", args, err)
		}
	}
}

// --shadow reaches the node's Config, from the command line and the
// environment.
func TestServeShadowFlag(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want bool
	}{
		{"default", nil, nil, false},
		{"flag", []string{"--shadow"}, nil, true},
		{"environment", nil, map[string]string{"RINGLIMIT_SHADOW": "true"}, true},
		{"flag over environment", []string{"--shadow=false"}, map[string]string{"RINGLIMIT_SHADOW": "true"}, false},
	} {
		o, err := parseServe(t, c.args, c.env)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		cfg, err := o.nodeConfig(nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.Shadow != c.want {
			t.Errorf("%s: Shadow %v, want %v", c.name, cfg.Shadow, c.want)
		}
	}
}
