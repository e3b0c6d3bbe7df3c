package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/fallback"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func parseServe(t *testing.T, args []string, env map[string]string) (*serveOptions, error) {
	t.Helper()
	var o serveOptions
	fs := serveFlags(&o, io.Discard)
	return &o, parse(fs, args, envOf(env), "config")
}

func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{"join": "RINGLIMIT_JOIN", "gossip-addr": "RINGLIMIT_GOSSIP_ADDR", "max-log-uses": "RINGLIMIT_MAX_LOG_USES"} {
		if got := envName(flag); got != want {
			t.Errorf("envName(%q) = %q, want %q", flag, got, want)
		}
	}
}

// flag > environment > config file > default, flag by flag.
func TestServePrecedence(t *testing.T) {
	cfgFile := writeFile(t, "node.yaml", `
name: from-file
gossip-addr: 127.0.0.1:1001
grpc-addr: 127.0.0.1:1002
http-addr: 127.0.0.1:1003
join: [10.0.0.1:7946, 10.0.0.2:7946]
replicas: 0
`)
	o, err := parseServe(t,
		[]string{"--config", cfgFile, "--name", "from-flag"},
		map[string]string{"RINGLIMIT_NAME": "from-env", "RINGLIMIT_GOSSIP_ADDR": "127.0.0.1:2001", "RINGLIMIT_TIMEOUT": "1s"})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct{ what, got, want string }{
		{"name: flag over env and file", o.name, "from-flag"},
		{"gossip-addr: env over file", o.gossipAddr, "127.0.0.1:2001"},
		{"grpc-addr: file over default", o.grpcAddr, "127.0.0.1:1002"},
		{"join: a YAML list joins with commas", o.join, "10.0.0.1:7946,10.0.0.2:7946"},
		{"profile: default", o.profile, "lan"},
		{"timeout: env over default", o.timeout.String(), "1s"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.what, c.got, c.want)
		}
	}
	cfg, err := o.nodeConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Replicas != -1 {
		t.Errorf("--replicas 0 gave Config.Replicas %d, want -1 (off)", cfg.Replicas)
	}
	if len(cfg.Join) != 2 || cfg.Join[1] != "10.0.0.2:7946" {
		t.Errorf("Config.Join = %q", cfg.Join)
	}
	if !cfg.FallbackSet || cfg.Fallback != fallback.Local {
		t.Errorf("default fallback: %v (set %v), want local", cfg.Fallback, cfg.FallbackSet)
	}
}

// The config file's path itself may come from the environment.
func TestServeConfigFromEnv(t *testing.T) {
	cfgFile := writeFile(t, "node.yaml", "profile: local\nfallback: deny\n")
	o, err := parseServe(t, nil, map[string]string{"RINGLIMIT_CONFIG": cfgFile})
	if err != nil {
		t.Fatal(err)
	}
	if o.profile != "local" || o.fallback != "deny" {
		t.Fatalf("profile %q fallback %q, want local and deny from the file", o.profile, o.fallback)
	}
}

// No flag, no environment, no file: the loopback defaults.
func TestServeDefaults(t *testing.T) {
	o, err := parseServe(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.nodeConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GossipAddr != "127.0.0.1:7946" || cfg.GRPCAddr != "127.0.0.1:7947" || cfg.HTTPAddr != "127.0.0.1:7948" {
		t.Errorf("default addresses %s %s %s", cfg.GossipAddr, cfg.GRPCAddr, cfg.HTTPAddr)
	}
	if cfg.Replicas != 1 || cfg.Timeout != 250*time.Millisecond || cfg.JoinTimeout != 30*time.Second || len(cfg.Join) != 0 {
		t.Errorf("defaults: replicas %d timeout %v join-timeout %v join %q", cfg.Replicas, cfg.Timeout, cfg.JoinTimeout, cfg.Join)
	}
}

func TestServeConfigErrors(t *testing.T) {
	cases := []struct {
		name, file string
		env        map[string]string
		args       []string
		want       string // in the error
	}{
		{"unknown field", "gossip-addr: 127.0.0.1:1\ngosip-addr: x\n", nil, nil, `:2: unknown field "gosip-addr"`},
		{"config inside config", "config: other.yaml\n", nil, nil, `unknown field "config"`},
		{"nested value", "join:\n  a: b\n", nil, nil, "join: want a value or a list"},
		{"not a mapping", "- a\n- b\n", nil, nil, "want a mapping"},
		{"bad value in file", "\n\nreplicas: many\n", nil, nil, ":3: replicas:"},
		{"duplicate", "name: a\nname: b\n", nil, nil, "name"},
		{"bad env value", "", map[string]string{"RINGLIMIT_TIMEOUT": "soon"}, nil, "RINGLIMIT_TIMEOUT"},
		{"unknown flag", "", nil, []string{"--gossip"}, "gossip"},
	}
	for _, c := range cases {
		args := append([]string{"--config", writeFile(t, "c.yaml", c.file)}, c.args...)
		_, err := parseServe(t, args, c.env)
		var ue *usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v; want a usage error containing %q", c.name, err, c.want)
		}
	}
	// An empty file sets nothing.
	if _, err := parseServe(t, []string{"--config", writeFile(t, "empty.yaml", "")}, nil); err != nil {
		t.Errorf("empty config file: %v", err)
	}
	if _, err := parseServe(t, []string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}, nil); err == nil {
		t.Error("missing config file: no error")
	}
}

func TestServeValueErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--replicas", "-1"}, "--replicas"},
		{[]string{"--replicas", "1000000"}, "--replicas: at most 16"},
		{[]string{"--fallback", "maybe"}, "--fallback"},
		{[]string{"--timeout", "0s"}, "--timeout"},
		{[]string{"--max-batch", "0"}, "--max-batch"},
		{[]string{"--max-keys", "-5"}, "--max-keys"},
		{[]string{"--gossip-key-file", "/nonexistent/key"}, "--gossip-key-file"},
		{[]string{"--auth-token-file", "/nonexistent/token"}, "--auth-token-file"},
		{[]string{"--peer-token-file", "/nonexistent/token"}, "--peer-token-file"},
	}
	for _, c := range cases {
		o, err := parseServe(t, c.args, nil)
		if err == nil {
			_, err = o.nodeConfig(nil)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v; want one naming %s", c.args, err, c.want)
		}
	}
}

// --peer-token-file (or RINGLIMIT_PEER_TOKEN_FILE) gives the node its
// peer token, without the file's surrounding white space.
func TestPeerTokenFile(t *testing.T) {
	tok := "0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"--peer-token-file", writeFile(t, "peer", tok+"\n")}, nil},
		{nil, map[string]string{"RINGLIMIT_PEER_TOKEN_FILE": writeFile(t, "peer", " "+tok+"\n")}},
	} {
		o, err := parseServe(t, c.args, c.env)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := o.nodeConfig(nil)
		if err != nil || cfg.PeerToken != tok {
			t.Errorf("%q %v: PeerToken %q, %v; want %q", c.args, c.env, cfg.PeerToken, err, tok)
		}
	}
	o, err := parseServe(t, []string{"--peer-token-file", writeFile(t, "empty", "\n")}, nil)
	if err == nil {
		_, err = o.nodeConfig(nil)
	}
	if err == nil || !strings.Contains(err.Error(), "--peer-token-file") {
		t.Errorf("empty peer token file: %v, want an error naming --peer-token-file", err)
	}
}

func TestGossipKeyFile(t *testing.T) {
	// Exactly 16, 24 or 32 bytes: the key itself, even when it would
	// also read as base64.
	raw := "0123456789abcdef0123456789abcdef"
	if k, err := readGossipKey(writeFile(t, "raw", raw+"\n")); err != nil || string(k) != raw {
		t.Errorf("raw key: %q %v", k, err)
	}
	// `openssl rand -base64 32`
	if k, err := readGossipKey(writeFile(t, "b64", "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA=\n")); err != nil || len(k) != 32 {
		t.Errorf("base64 key: %d bytes, %v", len(k), err)
	}
	if _, err := readGossipKey(writeFile(t, "short", "tooshort")); err == nil || !strings.Contains(err.Error(), "16, 24 or 32") {
		t.Errorf("short key: %v", err)
	}
}

// Exit codes and messages of the dispatcher, without a server.
func TestRunUsage(t *testing.T) {
	cases := []struct {
		args     []string
		env      map[string]string
		code     int
		inStderr string
	}{
		{nil, nil, exitUsage, "usage: ringlimit COMMAND"},
		{[]string{"frobnicate"}, nil, exitUsage, `unknown command "frobnicate"`},
		{[]string{"serve", "--help"}, nil, exitOK, "RINGLIMIT_GOSSIP_ADDR"},
		{[]string{"bench", "--help"}, nil, exitOK, "--concurrency"},
		{[]string{"consume", "k"}, nil, exitUsage, "--limit is required"},
		{[]string{"consume", "--limit", "5/1m"}, nil, exitUsage, "want at least one KEY"},
		{[]string{"consume", "--limit", "5/1w", "k"}, nil, exitUsage, "window"},
		{[]string{"peek", "--algorithm", "leaky", "--limit", "5/1m", "k"}, nil, exitUsage, "algorithm"},
		{[]string{"owner"}, nil, exitUsage, "exactly one KEY"},
		{[]string{"bench", "--zipf", "0.5"}, nil, exitUsage, "--zipf"},
		{[]string{"bench", "--mode", "redis"}, nil, exitUsage, "--redis ADDR or URL (or REDIS_URL or VALKEY_URL"},
		{[]string{"bench", "--mode", "redis", "--redis", "memcached://127.0.0.1:1"}, nil, exitUsage, "scheme memcached"},
		{[]string{"bench", "--redis", "127.0.0.1:1", "--peek"}, nil, exitUsage, "--peek is for the fleet"},
		{[]string{"bench"}, map[string]string{"RINGLIMIT_CONCURRENCY": "0"}, exitUsage, "--concurrency"},
		{[]string{"serve", "--log-level", "loud"}, nil, exitUsage, "--log-level"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(t.Context(), c.args, &env{stdout: &out, stderr: &errb, getenv: envOf(c.env)})
		if code != c.code || !strings.Contains(errb.String(), c.inStderr) {
			t.Errorf("ringlimit %q: exit %d, stderr %q; want exit %d and %q", c.args, code, errb.String(), c.code, c.inStderr)
		}
	}
	var out bytes.Buffer
	if code := run(t.Context(), []string{"version"}, &env{stdout: &out, stderr: io.Discard, getenv: envOf(nil)}); code != 0 || !strings.HasPrefix(out.String(), "ringlimit ") {
		t.Errorf("version: exit %d, %q", code, out.String())
	}
}

// --trace-keys, or RINGLIMIT_TRACE_KEYS, lists the keys a node traces.
func TestTraceKeysOption(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
	}{{[]string{"--trace-keys", "hot-1,hot-5"}, nil}, {nil, map[string]string{"RINGLIMIT_TRACE_KEYS": "hot-1,hot-5"}}} {
		o, err := parseServe(t, c.args, c.env)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := o.nodeConfig(slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cfg.TraceKeys, []string{"hot-1", "hot-5"}) {
			t.Errorf("%v %v: TraceKeys %q, want [hot-1 hot-5]", c.args, c.env, cfg.TraceKeys)
		}
	}
}
