package testenv

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	defaultRedisAddr = "127.0.0.1:6379"
	noRedisHelp      = "no Redis server: run `make services` (scripts/services/ensure.sh), " +
		"or `apt-get install redis-server`, or set RINGLIMIT_REDIS_URL"
)

var localRedis struct {
	once sync.Once
	ok   bool
}

// RedisURL returns a redis:// URL for a Redis server: $RINGLIMIT_REDIS_URL if
// set, else the local server on 127.0.0.1:6379 if it answers PING, else a
// private redis-server started for this test and stopped at cleanup.
// The server may be shared with other tests: use unique key names.
func RedisURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("RINGLIMIT_REDIS_URL"); u != "" {
		return u
	}
	localRedis.once.Do(func() {
		r, err := redisDo(defaultRedisAddr, 2*time.Second, "PING")
		localRedis.ok = err == nil && r == "PONG"
	})
	if localRedis.ok {
		return "redis://" + defaultRedisAddr + "/0"
	}
	addr, _ := RedisServer(t)
	return "redis://" + addr + "/0"
}

// RedisServer starts a private redis-server (no persistence) on a free
// loopback port and returns its address. stop shuts it down and is safe to
// call more than once; it also runs at cleanup.
func RedisServer(t testing.TB) (addr string, stop func()) {
	t.Helper()
	p, addr := startRedis(t, func() int { return FreePort(t) })
	return addr, p.stop
}

// RedisCluster starts a private Redis Cluster of 3 masters (no replicas) on
// free loopback ports, waits until every node reports cluster_state:ok, and
// returns the nodes' addresses, usable as seeds. It is stopped at cleanup.
func RedisCluster(t testing.TB) []string {
	t.Helper()
	const n = 3
	addrs := make([]string, n)
	for i := range addrs {
		_, addrs[i] = startRedis(t, func() int { return clusterPort(t) },
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
	}
	for i, addr := range addrs {
		// Distinct epochs, as redis-cli --cluster create sets them.
		mustRedis(t, addr, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1))
		lo, hi := i*16384/n, (i+1)*16384/n-1
		args := []string{"CLUSTER", "ADDSLOTS"}
		for s := lo; s <= hi; s++ {
			args = append(args, strconv.Itoa(s))
		}
		mustRedis(t, addr, args...)
	}
	for _, addr := range addrs[1:] {
		host, port, _ := net.SplitHostPort(addr)
		mustRedis(t, addrs[0], "CLUSTER", "MEET", host, port)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range addrs {
		for {
			info, err := redisDo(addr, 2*time.Second, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("testenv: Redis Cluster %v not ok after 30s; %s: %v\n%s", addrs, addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return addrs
}

// clusterPort returns a free port whose cluster bus port (port+10000) is free too.
func clusterPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		p := FreePort(t)
		if p+10000 <= 65535 && portFree(p+10000) {
			return p
		}
	}
	t.Fatalf("testenv: found no port P with P and P+10000 both free")
	return 0
}

func redisServerBin() string {
	return findBin([]string{"redis-server"}, "/usr/bin", "/usr/local/bin", "/usr/sbin")
}

// startRedis starts redis-server in its own t.TempDir on a port from pick,
// retrying on another port if it cannot start (the port was taken meanwhile).
func startRedis(t testing.TB, pick func() int, extra ...string) (*proc, string) {
	t.Helper()
	bin := redisServerBin()
	if bin == "" {
		t.Fatalf("testenv: redis-server not found on PATH or in /usr/bin: %s", noRedisHelp)
	}
	dir := t.TempDir()
	var lastErr error
	for attempt := range 3 {
		port := pick()
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		logPath := filepath.Join(dir, fmt.Sprintf("redis-%d.log", attempt))
		args := append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			"--dir", dir, "--logfile", logPath,
		}, extra...)
		p, err := startProc(bin, args, logPath)
		if err != nil {
			t.Fatalf("testenv: start %s: %v", bin, err)
		}
		t.Cleanup(p.stop)
		err = p.waitFor(10*time.Second, func() error {
			_, err := redisDo(addr, time.Second, "PING")
			return err
		})
		if err == nil {
			return p, addr
		}
		p.stop()
		lastErr = fmt.Errorf("%v\n%s", err, logTail(logPath, 15))
	}
	t.Fatalf("testenv: redis-server did not start: %v", lastErr)
	return nil, ""
}

func mustRedis(t testing.TB, addr string, args ...string) string {
	t.Helper()
	r, err := redisDo(addr, 5*time.Second, args...)
	if err != nil {
		t.Fatalf("testenv: %s on %s: %v", strings.Join(args[:min(len(args), 3)], " "), addr, err)
	}
	return r
}

// redisDo sends one command over a fresh RESP2 connection and returns the
// reply if it is a simple string, integer or bulk string.
func redisDo(addr string, timeout time.Duration, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
