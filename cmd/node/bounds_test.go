package main

import (
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit"
)

// --max-calls (RINGLIMIT_MAX_CALLS) bounds the calls of one client API
// request; its default is ringlimit.DefaultMaxCalls, and below 1 it is a
// usage error naming the flag.
func TestMaxCallsFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want int
	}{
		{nil, nil, ringlimit.DefaultMaxCalls},
		{[]string{"--max-calls", "64"}, nil, 64},
		{nil, map[string]string{"RINGLIMIT_MAX_CALLS": "7"}, 7},
	} {
		o, err := parseServe(t, c.args, c.env)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := o.nodeConfig(nil)
		if err != nil || cfg.MaxCalls != c.want {
			t.Errorf("%q %v: MaxCalls %d, %v; want %d", c.args, c.env, cfg.MaxCalls, err, c.want)
		}
	}
	o, err := parseServe(t, []string{"--max-calls", "0"}, nil)
	if err == nil {
		_, err = o.nodeConfig(nil)
	}
	if err == nil || !strings.Contains(err.Error(), "--max-calls") {
		t.Errorf("--max-calls 0: %v, want an error naming --max-calls", err)
	}
}
