package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testenv"
	storeredis "github.com/ringlimit/ringlimit/store/redis"
)

// bench --mode redis reaches Redis by --redis ADDR or URL, or, with no
// --redis, by REDIS_URL, else VALKEY_URL; valkey:// URLs work; a wrong
// address fails at start; the output names the host, never a password.
func TestBenchRedisURLs(t *testing.T) {
	opt, err := storeredis.ParseURL(testenv.RedisURL(t), storeredis.Config{})
	if err != nil {
		t.Fatal(err)
	}
	addr := opt.Addr
	short := []string{"bench", "--duration", "200ms", "--concurrency", "2", "--keys", "10", "--limit", "5/1s"}
	for _, c := range []struct {
		name       string
		args       []string
		env        map[string]string
		wantTarget string
	}{
		{"--redis ADDR", []string{"--redis", addr}, nil, addr},
		{"--redis valkey URL", []string{"--redis", "valkey://" + addr + "/0"}, nil, "valkey://" + addr},
		{"REDIS_URL", []string{"--mode", "redis"}, map[string]string{"REDIS_URL": "redis://" + addr, "VALKEY_URL": "redis://127.0.0.1:1"}, "redis://" + addr},
		{"VALKEY_URL", []string{"--mode", "redis"}, map[string]string{"VALKEY_URL": "valkey://:@" + addr}, "valkey://" + addr},
	} {
		var out, errb bytes.Buffer
		code := run(t.Context(), append(short, c.args...), &env{stdout: &out, stderr: &errb, getenv: envOf(c.env)})
		if code != exitOK {
			t.Fatalf("%s: exit %d, stderr %q", c.name, code, errb.String())
		}
		var res benchResult
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("%s: output %q: %v", c.name, out.String(), err)
		}
		if res.Mode != "redis" || res.Target != c.wantTarget || res.Allowed == 0 || res.Errors != 0 {
			t.Fatalf("%s: %+v, want redis mode at %s, some allowed, no errors", c.name, res, c.wantTarget)
		}
	}
	var out, errb bytes.Buffer
	code := run(t.Context(), append(short, "--redis", "redis://:s3cret@127.0.0.1:1"), &env{stdout: &out, stderr: &errb, getenv: envOf(nil)})
	if code == exitOK || !strings.Contains(errb.String(), "load the script") || strings.Contains(errb.String(), "s3cret") {
		t.Fatalf("a closed port: exit %d, stderr %q; want a failure at start without the password", code, errb.String())
	}
	awaitRedisDialers(t)
}

// awaitRedisDialers waits for go-redis's background re-dialer of a failed
// dial to notice its closed pool: it sleeps 1 s between tries, longer
// than the leak check at the end of the tests waits.
func awaitRedisDialers(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		if !bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("ConnPool).tryDial")) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("go-redis's re-dialer still runs 10 s after its client was closed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
