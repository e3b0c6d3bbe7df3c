package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testenv"
	storeredis "github.com/ringlimit/ringlimit/store/redis"
)

// Both Redis clients drive both scripts: the sliding log admits exactly
// its limit, GCRA its burst plus the refill; --server-pids reports the
// CPU of the pids given (here the test process itself, which is also the
// bench), and the bench's own CPU is always reported.
func TestBenchRedisClients(t *testing.T) {
	opt, err := storeredis.ParseURL(testenv.RedisURL(t), storeredis.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range []string{"rueidis", "go-redis"} {
		for _, c := range []struct {
			limit  string
			lo, hi uint64
		}{
			// One key, 400 ms: the log admits 5 (its window is 1 s);
			// the bucket 5 at once, plus at most 2 refilled.
			{"5/1s", 5, 5},
			{"token-bucket:5/1s", 5, 7},
		} {
			args := []string{"bench", "--redis", opt.Addr, "--redis-client", cl, "--limit", c.limit, "--keys", "1",
				"--concurrency", "4", "--duration", "400ms", "--server-pids", strconv.Itoa(os.Getpid())}
			var out, errb bytes.Buffer
			if code := run(t.Context(), args, &env{stdout: &out, stderr: &errb, getenv: envOf(nil)}); code != exitOK {
				t.Fatalf("%s %s: exit %d, stderr %q", cl, c.limit, code, errb.String())
			}
			var res benchResult
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("output %q: %v", out.String(), err)
			}
			if res.RedisClient != cl || res.Errors != 0 || res.Allowed < c.lo || res.Allowed > c.hi || res.Refused == 0 {
				t.Errorf("%s %s: %+v; want %d to %d allowed, some refused, no errors", cl, c.limit, res, c.lo, c.hi)
			}
			if res.ServerCPUError != "" || res.ServerCPUUsPerOp <= 0 || res.ClientCPUUsPerOp <= 0 {
				t.Errorf("%s %s: server CPU %v µs/op (%q), client %v µs/op; want both measured", cl, c.limit, res.ServerCPUUsPerOp, res.ServerCPUError, res.ClientCPUUsPerOp)
			}
		}
	}
	awaitRedisDialers(t)
}

// Bad --redis-client and --server-pids values are usage errors naming the
// flag; a pid that is gone is reported in the JSON, not a failure.
func TestBenchCPUFlags(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"--redis-client jedis", "--redis-client"},
		{"--server-pids 12,x", "--server-pids"},
		{"--server-pids 0", "--server-pids"},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"bench", "--server", "127.0.0.1:1", "--duration", "10ms"}, strings.Fields(c.args)...)
		if code := run(t.Context(), args, &env{stdout: &out, stderr: &errb, getenv: envOf(nil)}); code != exitUsage || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%s: exit %d, stderr %q; want a usage error naming %s", c.args, code, errb.String(), c.want)
		}
	}
	if _, err := procCPU([]int{1 << 30}); err == nil {
		t.Error("procCPU of a pid that does not exist: no error")
	}
	d, err := procCPU([]int{os.Getpid()})
	if err != nil || d <= 0 || d > time.Hour {
		t.Errorf("procCPU of this process: %v, %v", d, err)
	}
}
