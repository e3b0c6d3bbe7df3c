package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Each exit code of the README's table, from the real binary: the code,
// and the cause said exactly once (the node's log and the command's
// message used to repeat it). Exit 1 (refused) and exit 2 for a request
// the server refuses as invalid are checked by TestMultiProcess, against
// live nodes; exit 5 after start by TestServeShutdownIncompleteExitCode.
func TestServeExitCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs node processes; skipped with -short")
	}
	bin := buildBinary(t)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	taken, takenUDP := tcp.Addr().String(), udp.LocalAddr().String()
	dead := "127.0.0.1:" + strconv.Itoa(freePort(t))
	free := func() string { return "127.0.0.1:" + strconv.Itoa(freePort(t)) }
	badYAML := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(badYAML, []byte("no-such-flag: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	envoyList := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(envoyList, []byte("- domain: edge\n  descriptors:\n    - key: remote_address\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		code int
		once string // appears exactly once on stderr
		not  string // must not appear
	}{
		{"unknown flag", []string{"serve", "--bogus"}, exitUsage, "flag provided but not defined: -bogus", ""},
		{"bad value", []string{"serve", "--replicas", "-1"}, exitUsage, "--replicas", ""},
		{"bad config file", []string{"serve", "--config", badYAML}, exitUsage, `unknown field "no-such-flag"`, ""},
		{"envoy config is a YAML list", []string{"serve", "--envoy-config", envoyList}, exitUsage, "not a YAML list", "the file is empty"},
		{"missing TLS file", []string{"serve", "--grpc-addr", free(), "--gossip-addr", free(), "--http-addr", "-",
			"--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem", "--tls-ca", "/nonexistent/ca.pem"}, exitUsage, "Security.", ""},
		{"gRPC port taken", []string{"serve", "--grpc-addr", taken, "--gossip-addr", free(), "--http-addr", "-"}, exitBind, "address already in use", ""},
		{"HTTP port taken", []string{"serve", "--grpc-addr", free(), "--gossip-addr", free(), "--http-addr", taken}, exitBind, "address already in use", ""},
		{"gossip port taken", []string{"serve", "--grpc-addr", free(), "--gossip-addr", takenUDP, "--http-addr", "-"}, exitBind, "address already in use", "join"},
		{"pprof port taken", []string{"serve", "--grpc-addr", free(), "--gossip-addr", free(), "--http-addr", "-", "--pprof", taken}, exitBind, "address already in use", ""},
		{"nobody to join", []string{"serve", "--grpc-addr", free(), "--gossip-addr", free(), "--http-addr", "-",
			"--join", dead, "--join-timeout", "1s"}, exitJoin, "could not join the cluster", "bind"},
		{"consume: no node answers", []string{"consume", "--server", dead, "--timeout", "500ms", "--limit", "5/1m", "k"}, exitFailed, "ringlimit consume:", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, bin, c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, c.code, stderr)
			}
			if n := strings.Count(stderr, c.once); n != 1 {
				t.Errorf("stderr holds %q %d times, want once:\n%s", c.once, n, stderr)
			}
			if c.not != "" && strings.Contains(stderr, c.not) {
				t.Errorf("stderr says %q:\n%s", c.not, stderr)
			}
		})
	}
}

// A shutdown cut short by --shutdown-timeout (the hand-off and leave could
// not finish) exits 5, not 0: a supervisor must learn that keys may not
// have moved.
func TestServeShutdownIncompleteExitCode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs node processes; skipped with -short")
	}
	bin := buildBinary(t)
	n1 := startProc(t, bin, "node-1", "")
	n2 := startProc(t, bin, "node-2", n1.gossip, "--shutdown-timeout", "1ns")
	n1.waitReady(t)
	n2.waitReady(t)
	waitMembers(t, bin, n1, "node-1", "node-2")
	if err := n2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n2.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("node-2 still running 30 s after SIGTERM:\n%s", n2.log.String())
	}
	if code := n2.cmd.ProcessState.ExitCode(); code != exitFailed || !strings.Contains(n2.log.String(), "shutdown incomplete") {
		t.Fatalf("node-2 exit %d, want %d and \"shutdown incomplete\":\n%s", code, exitFailed, n2.log.String())
	}
}

// The README's table of exit codes lists exactly the codes the binary
// uses, and the usage text names each.
func TestExitCodesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "Every command exits with one of these codes")
	if !ok {
		t.Fatal("README.md has no exit-code table")
	}
	var got []int
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Split(line, "|"); len(f) > 2 {
			if n, err := strconv.Atoi(strings.TrimSpace(f[1])); err == nil {
				got = append(got, n)
			}
		}
		if len(got) > 0 && line == "" {
			break
		}
	}
	want := []int{exitOK, exitRefused, exitUsage, exitBind, exitJoin, exitFailed}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("README's exit codes %v, the binary's %v", got, want)
	}
	for _, c := range want {
		if !strings.Contains(exitCodesHelp, fmt.Sprintf("%d ", c)) {
			t.Errorf("the usage text does not name exit code %d: %q", c, exitCodesHelp)
		}
	}
}
