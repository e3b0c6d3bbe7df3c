package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/limiter"
)

// The multi-process test: the built binary, three node processes on
// 127.0.0.1, the CLI against them, then a join and a graceful leave while
// a client keeps calling.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs 4 node processes; skipped with -short")
	}
	bin := buildBinary(t)
	start := time.Now()
	n1 := startProc(t, bin, "node-1", "")
	n2 := startProc(t, bin, "node-2", n1.gossip)
	n3 := startProc(t, bin, "node-3", n1.gossip)
	for _, n := range []*proc{n1, n2, n3} {
		n.waitReady(t)
	}
	waitMembers(t, bin, n2, "node-1", "node-2", "node-3")

	// One key admits exactly its limit in total, whichever node is asked.
	nodes := []*proc{n1, n2, n3}
	allowed := 0
	for i := range 9 {
		n := nodes[i%3]
		code, out, stderr := runCLI(t, bin, "consume", "--server", n.grpc, "--limit", "5/1m", "e2e-key")
		v := verdictOf(t, out)
		switch code {
		case exitOK:
			if !v.Allowed {
				t.Fatalf("consume %d via %s: exit 0 with %s", i, n.name, out)
			}
			allowed++
		case exitRefused:
			if v.Allowed || v.RetryAfterMs <= 0 || v.RetryAtMs == 0 {
				t.Fatalf("consume %d via %s: exit 1 with %s; want a refusal with a wait", i, n.name, out)
			}
		default:
			t.Fatalf("consume %d via %s: exit %d, stderr %s", i, n.name, code, stderr)
		}
	}
	if allowed != 5 {
		t.Fatalf("9 consumes of a 5/1m key through 3 nodes admitted %d, want exactly 5", allowed)
	}
	if code, out, _ := runCLI(t, bin, "peek", "--server", n3.grpc, "--limit", "5/1m", "e2e-key"); code != exitRefused || verdictOf(t, out).Allowed {
		t.Fatalf("peek after the limit: exit %d %s; want exit 1, refused", code, out)
	}
	if code, _, stderr := runCLI(t, bin, "consume", "--server", n1.grpc, "--limit", "5/1m", "--cost", "6", "k"); code != exitUsage || !strings.Contains(stderr, "cost") {
		t.Fatalf("consume with cost above uses: exit %d, stderr %q; want exit 2 naming cost", code, stderr)
	}
	code, out, stderr := runCLI(t, bin, "owner", "--server", n2.grpc, "e2e-key")
	if owner := strings.TrimSpace(out); code != 0 || !slices.Contains([]string{"node-1", "node-2", "node-3"}, owner) {
		t.Fatalf("owner: exit %d, %q %s", code, out, stderr)
	}

	// bench: a peek run records nothing, so a consume run on the same
	// keys after it admits exactly 2 uses of each of its 50 keys.
	servers := n1.grpc + "," + n2.grpc + "," + n3.grpc
	shape := []string{"bench", "--server", servers, "--concurrency", "4", "--keys", "50", "--limit", "2/1m", "--duration", "300ms", "--seed", "7"}
	for _, peek := range []bool{true, false} {
		args := slices.Clone(shape)
		if peek {
			args = append(args, "--peek")
		}
		code, out, stderr := runCLI(t, bin, args...)
		var r benchResult
		if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil {
			t.Fatalf("bench (peek %v): exit %d, %v, out %s, stderr %s", peek, code, err, out, stderr)
		}
		switch {
		case r.Errors != 0 || r.Ops == 0 || r.Peek != peek:
			t.Fatalf("bench (peek %v): %s", peek, out)
		case peek && (r.Refused != 0 || r.MaxOveradmit != -1):
			t.Fatalf("bench --peek on fresh keys refused %d (max_overadmit %d): %s", r.Refused, r.MaxOveradmit, out)
		case !peek && (r.Allowed != 100 || r.MaxOveradmit != 0):
			t.Fatalf("bench after bench --peek admitted %d (max_overadmit %d), want exactly 50 keys x 2: %s", r.Allowed, r.MaxOveradmit, out)
		case !peek && (!r.ClientRefusalCache || r.ClientCacheHits == 0 || r.ClientCacheHits > int64(r.Refused)):
			t.Fatalf("bench on full keys: %d refusals, %d from the client's cache; want most from the cache: %s", r.Refused, r.ClientCacheHits, out)
		}
	}
	// The same keys, all full, with the client's cache off: every refusal
	// is the nodes'.
	code, out, stderr = runCLI(t, bin, append(slices.Clone(shape), "--client-refusal-cache=false")...)
	var off benchResult
	if err := json.Unmarshal([]byte(out), &off); code != 0 || err != nil || off.Refused == 0 || off.Allowed != 0 || off.ClientCacheHits != 0 || off.ClientRefusalCache {
		t.Fatalf("bench --client-refusal-cache=false: exit %d, %v, out %s, stderr %s; want only the nodes' refusals", code, err, out, stderr)
	}

	t.Logf("%v: CLI checks done", time.Since(start).Round(time.Millisecond))
	// Continuous calls through a client of the first three nodes, while a
	// 4th joins and the 3rd leaves gracefully: no call may fail.
	c, err := client.DialConfig(t.Context(), client.Config{Addrs: []string{n1.grpc, n2.grpc, n3.grpc}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var calls, failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	lim := limiter.Limit{Algorithm: limiter.SlidingWindow, Uses: 1 << 30, Window: time.Minute}
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := c.ConsumeMany(context.Background(), []limiter.Entry{{Key: fmt.Sprintf("cont-%d-%d", w, i%500), Limit: lim}})
				calls.Add(1)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	stopCalls := func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}
	defer stopCalls()
	waitCalls := func(n int64) {
		t.Helper()
		target := calls.Load() + n
		deadline := time.Now().Add(20 * time.Second)
		for calls.Load() < target {
			if time.Now().After(deadline) {
				t.Fatalf("calls stalled at %d", calls.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitCalls(200)
	t.Logf("%v: %d calls; starting node-4", time.Since(start).Round(time.Millisecond), calls.Load())
	n4 := startProc(t, bin, "node-4", n1.gossip)
	n4.waitReady(t)
	waitMembers(t, bin, n1, "node-1", "node-2", "node-3", "node-4")
	waitCalls(200)
	t.Logf("%v: %d calls; node-4 in; SIGTERM to node-3", time.Since(start).Round(time.Millisecond), calls.Load())
	if err := n3.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n3.done:
		if n3.err != nil {
			t.Fatalf("node-3 after SIGTERM: %v; want a clean exit 0\n%s", n3.err, n3.log.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("node-3 did not stop within 20 s of SIGTERM\n%s", n3.log.String())
	}
	t.Logf("%v: %d calls; node-3 exited", time.Since(start).Round(time.Millisecond), calls.Load())
	waitMembers(t, bin, n2, "node-1", "node-2", "node-4")
	waitCalls(200)
	stopCalls()
	if f := failures.Load(); f != 0 {
		t.Fatalf("%d of %d calls failed during the join and the leave; first: %v", f, calls.Load(), firstErr.Load())
	}
	t.Logf("%d calls, none failed, through a join and a graceful leave", calls.Load())
	if !strings.Contains(n1.log.String(), "member joined") || !strings.Contains(n1.log.String(), "node-4") {
		t.Errorf("node-1 did not log node-4 joining:\n%s", n1.log.String())
	}
}

var (
	buildOnce sync.Once
	buildDir  string // removed by TestMain
	buildErr  error
)

// buildBinary builds the ringlimit binary, once per test run, into a
// temporary directory that TestMain removes.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "ringlimit-e2e-"); buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(buildDir, "ringlimit"), ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "ringlimit")
}

// cleanEnv is the test's environment without RINGLIMIT_ variables, so the
// processes see only their flags.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			out = append(out, kv)
		}
	}
	return out
}

func runCLI(t *testing.T, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cleanEnv()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run %q: %v", args, err)
	}
	return code, o.String(), e.String()
}

// verdictOf reads consume's output: one JSON object with exactly the five
// fields.
func verdictOf(t *testing.T, out string) ringlimit.JSONVerdict {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &fields); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	var names []string
	for k := range fields {
		names = append(names, k)
	}
	slices.Sort(names)
	if want := []string{"allowed", "remaining", "reset_at_ms", "retry_after_ms", "retry_at_ms"}; !slices.Equal(names, want) {
		t.Fatalf("output fields %q, want %q", names, want)
	}
	var v ringlimit.JSONVerdict
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// waitMembers polls `members` until exactly the named nodes are alive.
func waitMembers(t *testing.T, bin string, via *proc, names ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		code, out, stderr := runCLI(t, bin, "members", "--server", via.grpc)
		last = out + stderr
		if code == 0 {
			var ms []memberJSON
			if err := json.Unmarshal([]byte(out), &ms); err != nil {
				t.Fatalf("members output %q: %v", out, err)
			}
			var alive []string
			for _, m := range ms {
				if m.State == "alive" {
					if m.GRPCAddr == "" || m.GossipAddr == "" {
						t.Fatalf("member without addresses: %+v", m)
					}
					alive = append(alive, m.Name)
				}
			}
			slices.Sort(alive)
			if slices.Equal(alive, names) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("members via %s never showed exactly %q alive; last: %s", via.name, names, last)
}

// proc is one `ringlimit serve` process.
type proc struct {
	name, gossip, grpc, http string
	cmd                      *exec.Cmd
	log                      *testenv.LogBuffer
	done                     chan struct{}
	err                      error
}

func startProc(t *testing.T, bin, name, join string, extra ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: &testenv.LogBuffer{}, done: make(chan struct{})}
	p.gossip = "127.0.0.1:" + strconv.Itoa(freePort(t))
	p.grpc = "127.0.0.1:" + strconv.Itoa(freePort(t))
	p.http = "127.0.0.1:" + strconv.Itoa(freePort(t))
	args := []string{"serve", "--name", name, "--gossip-addr", p.gossip, "--grpc-addr", p.grpc, "--http-addr", p.http, "--profile", "local"}
	if join != "" {
		args = append(args, "--join", join)
	}
	args = append(args, extra...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = cleanEnv()
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.log.String())
		}
	})
	return p
}

var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}

// waitReady polls /readyz until the node answers 200.
func (p *proc) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("%s exited: %v\n%s", p.name, p.err, p.log.String())
		default:
		}
		resp, err := httpClient.Get("http://" + p.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s not ready within 20 s\n%s", p.name, p.log.String())
}

// freePort returns a port free for both TCP and UDP on 127.0.0.1 (gossip
// uses both).
func freePort(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}
