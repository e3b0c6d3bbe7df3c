package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build compiles the ringlimit binary (./cmd/node of the module that holds
// dir) into out and returns its path. The error carries the compiler's
// output.
func Build(ctx context.Context, dir, out string) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("chaos: go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if dir != "" {
		root = dir
	}
	bin := filepath.Join(out, "ringlimit")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/node")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("chaos: go build -o %s ./cmd/node in %s: %w\n%s", bin, root, err, b)
	}
	return bin, nil
}

// Proc is one ringlimit node process. Its slot fixes its loopback address,
// its ports and (when the harness runs as root) the user it runs as, so a
// restarted node comes back as the same member at the same addresses.
type Proc struct {
	Name string
	// Host is the node's own loopback address (127.x.y.z).
	Host string
	// Ports.
	GossipPort, GRPCPort, HTTPPort int
	// UID the process runs as (-1: the harness's own).
	UID int
	// Log is the path of the node's combined stdout/stderr.
	Log string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	starts  int
}

// GossipAddr, GRPCAddr and HTTPAddr are host:port.
func (p *Proc) GossipAddr() string { return net.JoinHostPort(p.Host, strconv.Itoa(p.GossipPort)) }
func (p *Proc) GRPCAddr() string   { return net.JoinHostPort(p.Host, strconv.Itoa(p.GRPCPort)) }
func (p *Proc) HTTPAddr() string   { return net.JoinHostPort(p.Host, strconv.Itoa(p.HTTPPort)) }

// NodeArgs are the flags every node gets.
type NodeArgs struct {
	Binary   string
	Replicas int
	Fallback string
	Timeout  time.Duration
	// Sabotage is the nodes' RINGLIMIT_SABOTAGE (internal/sabotage,
	// test-only); "" for every run but a contrast run. The harness's own
	// environment never passes one through.
	Sabotage string
}

// Start runs the node (again), joining the given gossip addresses. Its
// output is appended to p.Log.
func (p *Proc) Start(a NodeArgs, join []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("chaos: %s is already running", p.Name)
		}
	}
	args := []string{"serve", "--name", p.Name,
		"--gossip-addr", p.GossipAddr(), "--grpc-addr", p.GRPCAddr(), "--http-addr", p.HTTPAddr(),
		"--profile", "local", "--replicas", strconv.Itoa(a.Replicas),
		"--fallback", a.Fallback, "--timeout", a.Timeout.String(),
		"--log-stalls", nodeStallThreshold.String()}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: node log: %w", err)
	}
	p.starts++
	fmt.Fprintf(f, "==== chaos: start %d at %s: %s %s\n", p.starts, time.Now().Format(time.RFC3339Nano), a.Binary, strings.Join(args, " "))
	cmd := exec.Command(a.Binary, args...)
	cmd.Env = nodeEnv(os.Environ(), a.Sabotage)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if p.UID >= 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(p.UID), Gid: uint32(p.UID)}
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("chaos: start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.exitErr = cmd, done, nil
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Running reports whether the process is alive (possibly stopped).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("chaos: %s is not running", p.Name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("chaos: signal %v to %s: %w", sig, p.Name, err)
	}
	return nil
}

// Wait waits for the process to exit and returns how it exited.
func (p *Proc) Wait(ctx context.Context) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.exitErr
	case <-ctx.Done():
		return fmt.Errorf("chaos: %s did not exit: %w", p.Name, ctx.Err())
	}
}

// Stop ends the process: SIGCONT (in case it was stopped), SIGTERM, and
// SIGKILL if it has not exited within grace.
func (p *Proc) Stop(grace time.Duration) {
	if !p.Running() {
		return
	}
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if p.Wait(ctx) != nil && p.Running() {
		_ = p.Signal(syscall.SIGKILL)
		_ = p.Wait(context.Background())
	}
}

// WaitReady polls /readyz until it answers 200.
func (p *Proc) WaitReady(ctx context.Context) error {
	c := &http.Client{Timeout: 500 * time.Millisecond}
	url := "http://" + p.HTTPAddr() + "/readyz"
	for {
		if !p.Running() {
			return fmt.Errorf("chaos: %s exited before it was ready: %v", p.Name, p.Wait(ctx))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: %s not ready: %w", p.Name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Tail returns the last n lines of the node's log.
func (p *Proc) Tail(n int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// freePort finds a port free for TCP (and UDP, when udp) on host.
func freePort(host string, udp bool) (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, fmt.Errorf("chaos: find a free port on %s: %w", host, err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !udp {
			l.Close()
			return port, nil
		}
		u, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, errors.New("chaos: no port free for both TCP and UDP")
}

// newProc places a node in slot: its own loopback address, free ports.
func newProc(name, host string, uid int, logDir string) (*Proc, error) {
	p := &Proc{Name: name, Host: host, UID: uid, Log: filepath.Join(logDir, name+".log")}
	var err error
	if p.GossipPort, err = freePort(host, true); err != nil {
		return nil, err
	}
	for p.GRPCPort == 0 || p.GRPCPort == p.GossipPort {
		if p.GRPCPort, err = freePort(host, false); err != nil {
			return nil, err
		}
	}
	for p.HTTPPort == 0 || p.HTTPPort == p.GossipPort || p.HTTPPort == p.GRPCPort {
		if p.HTTPPort, err = freePort(host, false); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// nodeEnv is env without any RINGLIMIT_SABOTAGE, plus sabotage when set.
func nodeEnv(env []string, sabotage string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "RINGLIMIT_SABOTAGE=") {
			out = append(out, kv)
		}
	}
	if sabotage != "" {
		out = append(out, "RINGLIMIT_SABOTAGE="+sabotage)
	}
	return out
}
