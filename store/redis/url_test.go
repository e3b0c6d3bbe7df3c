package redis

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/limiter"
)

// hostPort is the host:port of the test Redis's URL.
func hostPort(t *testing.T) string {
	t.Helper()
	opt, err := ParseURL(testenv.RedisURL(t), Config{})
	if err != nil {
		t.Fatal(err)
	}
	return opt.Addr
}

// countsOne opens a store at rawURL (or from the environment when empty)
// and checks that it counts on the server.
func countsOne(t *testing.T, rawURL string) {
	t.Helper()
	s, err := Open(rawURL, Config{Secret: testSecret, Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatalf("Open(%q): %v", rawURL, err)
	}
	defer s.Close()
	l := limiter.Limit{Uses: 1, Window: time.Minute}
	mustConsume(t, s, "k", l, true)
	mustConsume(t, s, "k", l, false)
}

// valkey:// and valkeys:// are read as redis:// and rediss://.
func TestValkeySchemes(t *testing.T) {
	addr := hostPort(t)
	countsOne(t, "valkey://"+addr+"/0")
	countsOne(t, "VALKEY://"+addr)
	opt, err := ParseURL("valkeys://u:pw@cache.internal:6380/2", Config{RequireTLS: true})
	if err != nil {
		t.Fatalf("ParseURL(valkeys://...) with RequireTLS: %v", err)
	}
	if opt.TLSConfig == nil || opt.Addr != "cache.internal:6380" || opt.DB != 2 || opt.Username != "u" || opt.Password != "pw" {
		t.Fatalf("valkeys:// parsed as %+v, want TLS to cache.internal:6380, db 2, user u", opt)
	}
	if _, err := ParseURL("valkey://cache.internal:6379", Config{RequireTLS: true}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "valkeys://") {
		t.Fatalf("plaintext valkey:// to a remote host with RequireTLS: %v, want a ConfigError pointing to valkeys://", err)
	}
	if _, err := ParseURL("memcached://127.0.0.1:11211", Config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("an unknown scheme: %v, want a ConfigError", err)
	}
}

// With no URL, Open and ParseURL read REDIS_URL, else VALKEY_URL; with
// neither set they say so.
func TestURLFromEnvironment(t *testing.T) {
	addr := hostPort(t)
	t.Setenv("REDIS_URL", "")
	t.Setenv("VALKEY_URL", "")
	if _, err := Open("", Config{Secret: testSecret}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "REDIS_URL") {
		t.Fatalf("Open(\"\") with no variable set: %v, want a ConfigError naming REDIS_URL and VALKEY_URL", err)
	}
	t.Setenv("VALKEY_URL", "valkey://"+addr)
	countsOne(t, "")
	// REDIS_URL comes first: a bad one proves it was read.
	t.Setenv("REDIS_URL", "redis://127.0.0.1:1")
	if _, err := Open("", Config{Secret: testSecret}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open(\"\") with REDIS_URL at a closed port: %v, want ErrUnavailable (REDIS_URL read before VALKEY_URL)", err)
	}
	t.Setenv("REDIS_URL", "redis://"+addr+"/3")
	opt, err := ParseURL("", Config{})
	if err != nil || opt.Addr != addr || opt.DB != 3 {
		t.Fatalf("ParseURL(\"\") with REDIS_URL set: %+v %v", opt, err)
	}
	countsOne(t, "")
	awaitDialers(t)
}

// awaitDialers waits for go-redis's background re-dialer of a failed dial
// to notice its closed pool (it sleeps 1 s between tries), so the leak
// check after the tests does not catch it.
func awaitDialers(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		if !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "ConnPool).tryDial") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("go-redis's re-dialer still runs 10 s after its client was closed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The dial timeout is the call timeout, but at least 1 s.
func TestDialTimeoutAtLeastOneSecond(t *testing.T) {
	for _, c := range []struct{ timeout, dial time.Duration }{
		{100 * time.Millisecond, time.Second},
		{0, time.Second}, // the 1 s default
		{3 * time.Second, 3 * time.Second},
	} {
		opt, err := ParseURL("redis://127.0.0.1:6379", Config{Timeout: c.timeout})
		if err != nil {
			t.Fatal(err)
		}
		read := c.timeout
		if read == 0 {
			read = DefaultTimeout
		}
		if opt.DialTimeout != c.dial || opt.ReadTimeout != read {
			t.Fatalf("Timeout %v: dial %v read %v, want dial %v read %v", c.timeout, opt.DialTimeout, opt.ReadTimeout, c.dial, read)
		}
	}
}

// Open connects before it returns: a closed port, a server that never
// answers and a wrong password fail there, matching ErrUnavailable, and
// the password is not in the message.
func TestOpenFailsAtStart(t *testing.T) {
	if _, err := Open("redis://127.0.0.1:1", Config{Secret: testSecret}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open at a closed port: %v, want ErrUnavailable", err)
	}
	silent := newFreezer(t, "")
	start := time.Now()
	if _, err := Open("redis://"+silent.addr(), Config{Secret: testSecret, Timeout: 100 * time.Millisecond}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open at a server that never answers: %v, want ErrUnavailable", err)
	}
	// Not a performance assertion: only that Open gives up rather than hang.
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Open at a silent server took %v", took)
	}
	// A private server, so the shared one's password is not touched.
	addr, _ := testenv.RedisServer(t)
	pc := goredis.NewClient(&goredis.Options{Addr: addr})
	defer pc.Close()
	if err := pc.Do(context.Background(), "CONFIG", "SET", "requirepass", "right-password").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := Open("redis://:wrong-password@"+addr, Config{Secret: testSecret})
	if !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "wrong-password") {
		t.Fatalf("Open with a wrong password: %v, want ErrUnavailable without the password", err)
	}
	countsOne(t, "redis://:right-password@"+addr)
	awaitDialers(t)
}

// freezer is a TCP proxy to a Redis; frozen (or with no target), it holds
// every byte, like a hung server or a black-holed network.
type freezer struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target}
	f.frozen.Store(target == "")
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(f.close)
	return f
}

func (f *freezer) addr() string { return f.ln.Addr().String() }

func (f *freezer) track(c net.Conn) {
	f.mu.Lock()
	f.conns = append(f.conns, c)
	f.mu.Unlock()
}

func (f *freezer) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.track(c)
		if f.target == "" {
			continue // answer nothing
		}
		up, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.track(up)
		f.wg.Add(2)
		go f.pipe(up, c)
		go f.pipe(c, up)
	}
}

// pipe copies src to dst until either closes; bytes read while frozen are
// dropped, so the other side waits for an answer that never comes.
func (f *freezer) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !f.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

func (f *freezer) close() {
	f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
