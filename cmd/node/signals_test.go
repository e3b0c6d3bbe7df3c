package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testenv"
)

// A node whose log pipe closes (the reader exited) must not die of
// SIGPIPE: on SIGTERM it still hands off, leaves and exits 0, and its peer
// sees it leave. Without signal.Ignore(SIGPIPE) in serve it dies at its
// first log line after the close (exit by signal, "broken pipe").
func TestServeSurvivesClosedLogPipe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs node processes; skipped with -short")
	}
	bin := buildBinary(t)
	n1 := startProc(t, bin, "node-1", "")
	n1.waitReady(t)

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	http := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command(bin, "serve", "--name", "node-2", "--profile", "local", "--join", n1.gossip,
		"--gossip-addr", "127.0.0.1:"+strconv.Itoa(freePort(t)), "--grpc-addr", "127.0.0.1:"+strconv.Itoa(freePort(t)), "--http-addr", http)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	})
	// Read until the node is ready, then close the pipe's read end: every
	// later write of the node's logs fails.
	var head strings.Builder
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		head.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "node ready") {
			break
		}
	}
	r.Close()
	if !strings.Contains(head.String(), "node ready") {
		t.Fatalf("node-2 never logged ready:\n%s", head.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("node-2 still running 30 s after SIGTERM")
	}
	if waitErr != nil {
		t.Fatalf("node-2 with a closed log pipe: %v (want exit 0 after a graceful stop); it wrote before the close:\n%s", waitErr, head.String())
	}
	waitLog(t, n1.log, 20*time.Second, leftLine("", "node-2"))
}

// Ctrl-C on `make cluster`: SIGINT to the script's process group (which
// holds the script and its log prefixers, as the terminal's foreground
// group does) stops every node gracefully. Each peer logs the stopped
// node as "left" (not suspect or dead), every node logs "stopped", and no
// node is alive once the script is done. Without the prefixers ignoring
// the signal, they died first and the nodes' last lines (and, without the
// SIGPIPE fix, the nodes themselves) went with them.
//
// SIGHUP (the terminal closed) and SIGTERM do the same: the script used to
// trap only INT and TERM, so SIGHUP left three nodes running.
func TestClusterScriptStopsOnSIGINT(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs scripts/cluster.sh; skipped with -short")
	}
	bin := buildBinary(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { testClusterScriptStops(t, bin, sig) })
	}
}

func testClusterScriptStops(t *testing.T, bin string, sig syscall.Signal) {
	base := freeBase(t)
	const shutdownTimeout = 10 * time.Second
	script, err := filepath.Abs("../../scripts/cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", script, "--shutdown-timeout", shutdownTimeout.String())
	cmd.Env = append(cleanEnv(), "CLUSTER_BIN="+bin, "CLUSTER_HOST=127.0.0.1", "CLUSTER_BASE_PORT="+strconv.Itoa(base))
	out := &testenv.LogBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own session and process group, as a terminal's job is.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	var pids []int
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("cluster.sh output:\n%s", out.String())
		}
	})

	pidLine := regexp.MustCompile(`cluster: node-(\d) pid (\d+) `)
	deadline := time.Now().Add(10 * time.Second)
	for len(pids) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the script did not print its 3 node pids:\n%s", out.String())
		}
		pids = pids[:0]
		for _, m := range pidLine.FindAllStringSubmatch(out.String(), -1) {
			pid, _ := strconv.Atoi(m[2])
			pids = append(pids, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	nodes := make([]*proc, 3)
	for i := range nodes {
		p := base + 10*i
		nodes[i] = &proc{name: fmt.Sprintf("node-%d", i+1), grpc: "127.0.0.1:" + strconv.Itoa(p+1), http: "127.0.0.1:" + strconv.Itoa(p+2), done: make(chan struct{})}
		nodes[i].log = out
		nodes[i].waitReady(t)
	}
	waitMembers(t, bin, nodes[0], "node-1", "node-2", "node-3")
	// node-1 started alone, so its member watch logs the other two
	// joining: once it has, the watches run with everyone alive.
	for _, m := range []string{"node-2", "node-3"} {
		waitLog(t, out, 20*time.Second, regexp.MustCompile(`(?m)^\[node-1\] .*member=`+m+` gossip=.* state=alive$`))
	}

	if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil {
		t.Fatal(err)
	}
	// The script stops the nodes one after the other, each within the
	// shutdown timeout.
	select {
	case <-done:
	case <-time.After(3*shutdownTimeout + 20*time.Second):
		t.Fatalf("the script still runs %v after %v", 3*shutdownTimeout+20*time.Second, sig)
	}
	if waitErr != nil {
		t.Errorf("the script after %v: %v, want exit 0", sig, waitErr)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("node pid %d is alive after the script stopped (kill -0: %v)", pid, err)
		}
	}
	log := out.String()
	// node-3 stops first, then node-2, then node-1: each earlier node
	// sees each later one leave.
	for _, want := range []*regexp.Regexp{
		leftLine("node-1", "node-3"), leftLine("node-2", "node-3"), leftLine("node-1", "node-2"),
		stoppedLine("node-1"), stoppedLine("node-2"), stoppedLine("node-3"),
	} {
		if !want.MatchString(log) {
			t.Errorf("the cluster's output has no line matching %s", want)
		}
	}
	for _, bad := range []string{"to=dead", "status 141"} {
		if strings.Contains(log, bad) {
			t.Errorf("the cluster's output says %q: a node was not stopped gracefully", bad)
		}
	}
}

// freeBase returns a base port for the script: the 9 ports base+{0,1,2},
// base+{10,11,12}, base+{20,21,22} free on 127.0.0.1 for TCP and UDP a
// moment ago.
func freeBase(t *testing.T) int {
	t.Helper()
	for range 100 {
		base := freePort(t)
		if base > 65535-22 {
			continue
		}
		ok := true
		for _, off := range []int{0, 1, 2, 10, 11, 12, 20, 21, 22} {
			if !portFreeBoth(base + off) {
				ok = false
				break
			}
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free range of ports for the cluster script")
	return 0
}

func portFreeBoth(port int) bool {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// leftLine matches the line in which node (its prefix in the script's
// output; "" for none) logs member as gone gracefully: "member changed
// state ... from=alive to=left" (from=suspect on a busy machine, where a
// starved member misses a probe before it leaves), or "member joined ...
// state=left" when its 250 ms watch first saw the member already leaving.
// Never "to=dead": that is a crash, not a leave.
func leftLine(node, member string) *regexp.Regexp {
	prefix := ""
	if node != "" {
		prefix = `\[` + node + `\] `
	}
	return regexp.MustCompile(`(?m)^` + prefix + `.*member=` + member + ` (from=(alive|suspect) to=left|gossip=.* state=left)$`)
}

func stoppedLine(node string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^\[` + node + `\] .*msg="ringlimit: stopped"`)
}

// waitLog polls log until want matches it.
func waitLog(t *testing.T, log *testenv.LogBuffer, timeout time.Duration, want *regexp.Regexp) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	for !want.MatchString(log.String()) {
		select {
		case <-ctx.Done():
			t.Fatalf("no %q in the log within %v:\n%s", want, timeout, log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
