package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// benchCPUOptions are bench's flags for CPU accounting and the Redis
// client (issue 20).
type benchCPUOptions struct {
	serverPIDs  string
	redisClient string
}

func (o *benchCPUOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.serverPIDs, "server-pids", "", "`PID[,PID...]` of the server processes (the nodes, or redis-server): their user+system CPU time over the run, read from /proc/PID/stat, is reported per decision as server_cpu_us_per_op")
	fs.StringVar(&o.redisClient, "redis-client", redisClientRueidis, "`CLIENT` of --mode redis: rueidis (github.com/redis/rueidis, with its default auto-pipelining) or go-redis")
}

// Redis clients of --redis-client.
const (
	redisClientRueidis = "rueidis"
	redisClientGoRedis = "go-redis"
)

func (o *benchCPUOptions) validate() error {
	if o.redisClient != redisClientRueidis && o.redisClient != redisClientGoRedis {
		return usagef("--redis-client: %q is not rueidis or go-redis", o.redisClient)
	}
	if _, err := parsePIDs(o.serverPIDs); err != nil {
		return err
	}
	return nil
}

// benchCPU is the part of bench's JSON that says where the CPU went.
type benchCPU struct {
	RedisClient string `json:"redis_client,omitempty"`
	// ServerCPUUsPerOp is the user+system CPU time of --server-pids over
	// the run, in µs per decision; absent without --server-pids.
	ServerCPUUsPerOp float64 `json:"server_cpu_us_per_op,omitempty"`
	ServerCPUS       float64 `json:"server_cpu_s,omitempty"`
	// ClientCPUUsPerOp is the bench process's own CPU time per decision.
	ClientCPUUsPerOp float64 `json:"client_cpu_us_per_op"`
	ServerCPUError   string  `json:"server_cpu_error,omitempty"`
}

func parsePIDs(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid < 1 {
			return nil, usagef("--server-pids: %q is not a process id", f)
		}
		out = append(out, pid)
	}
	return out, nil
}

// procCPU sums utime+stime of pids from /proc/PID/stat.
func procCPU(pids []int) (time.Duration, error) {
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return 0, fmt.Errorf("server CPU of pid %d: %w", pid, err)
		}
		// The command name (field 2) is in parentheses and may hold
		// spaces: the fields after it follow the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			return 0, fmt.Errorf("server CPU of pid %d: unreadable /proc stat %q", pid, s)
		}
		f := strings.Fields(s[i+1:])
		// f[0] is field 3 (state); utime and stime are fields 14 and 15.
		if len(f) < 13 {
			return 0, fmt.Errorf("server CPU of pid %d: unreadable /proc stat %q", pid, s)
		}
		u, err1 := strconv.ParseInt(f[11], 10, 64)
		st, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("server CPU of pid %d: unreadable /proc stat %q", pid, s)
		}
		ticks += u + st
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// cpuMeter measures the bench process and the server pids over a run.
type cpuMeter struct {
	pids    []int
	self0   time.Duration
	server0 time.Duration
	err     error
}

func startCPUMeter(o *benchCPUOptions) *cpuMeter {
	m := &cpuMeter{}
	m.pids, _ = parsePIDs(o.serverPIDs) // validated
	m.self0 = selfCPU()
	if len(m.pids) > 0 {
		m.server0, m.err = procCPU(m.pids)
	}
	return m
}

func (m *cpuMeter) stop(ops uint64, out *benchCPU) {
	self := selfCPU() - m.self0
	n := float64(max(ops, 1))
	out.ClientCPUUsPerOp = round(float64(self.Microseconds())/n, 2)
	if len(m.pids) == 0 {
		return
	}
	server, err := procCPU(m.pids)
	if m.err == nil {
		m.err = err
	}
	if m.err != nil {
		out.ServerCPUError = m.err.Error()
		return
	}
	d := server - m.server0
	out.ServerCPUS = round(d.Seconds(), 2)
	out.ServerCPUUsPerOp = round(float64(d.Microseconds())/n, 2)
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
