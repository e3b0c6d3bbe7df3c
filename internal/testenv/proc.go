package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a foreground server process owned by one test.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	stop func() // idempotent: SIGTERM, then SIGKILL after 10 s
}

// startProc starts bin with args, its stdout and stderr appended to logPath.
func startProc(bin string, args []string, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	p.stop = sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitFor polls ready every 50 ms until it returns nil, p exits, or timeout.
func (p *proc) waitFor(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if p != nil && p.exited() {
			return errExited{err}
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type errExited struct{ last error }

func (e errExited) Error() string {
	return "server exited during start-up (last check: " + e.last.Error() + ")"
}

// logTail returns the last n lines of a log file, for failure messages.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// findBin returns the first existing executable among names on PATH and dirs.
func findBin(names []string, dirs ...string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
		for _, d := range dirs {
			p := filepath.Join(d, n)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return p
			}
		}
	}
	return ""
}

// newestVersionDir picks, among dirs like /usr/lib/postgresql/15/bin, the one
// with the highest numeric version component.
func newestVersionDir(pattern string, versionOf func(string) string) string {
	m, _ := filepath.Glob(pattern)
	sort.Slice(m, func(i, j int) bool {
		a, _ := strconv.ParseFloat(versionOf(m[i]), 64)
		b, _ := strconv.ParseFloat(versionOf(m[j]), 64)
		return a < b
	})
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1]
}

// randomName returns prefix followed by 12 random hex digits.
func randomName(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

// privateDir makes a short-pathed directory (unix socket paths are limited to
// about 100 bytes) that other users can traverse, removed at cleanup.
func privateDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return dir
}
