package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// benchProcs are bench's flags for runs over several client processes
// (--processes P): the parent starts P children, each a bench of one
// process with the same flags and keys, and merges their results and
// their admission logs, so the over-admission check covers callers in
// different processes (leaseholders among them).
type benchProcs struct {
	processes int
	// The children's own flags (not for users).
	index      int
	admissions string
	startUs    int64
}

func (p *benchProcs) register(fs *flag.FlagSet) {
	fs.IntVar(&p.processes, "processes", 1, "client processes (`P`): the bench starts P copies of itself, each with --concurrency workers, and merges their results and admission logs (max_overadmit covers all of them)")
	fs.IntVar(&p.index, "process-index", 0, "(internal) this child's index among --processes")
	fs.StringVar(&p.admissions, "admissions-file", "", "(internal) where a child writes its admission log")
	fs.Int64Var(&p.startUs, "start-unix-us", 0, "(internal) the wall-clock µs the children's times count from")
}

// childStart waits, in a child, for the moment every child starts (a
// second after the parent's --start-unix-us, so that slow dials still
// overlap) and returns it with its offset from --start-unix-us in µs (the
// processes share the machine's wall clock; each measures on its own
// monotonic clock from there).
func (p *benchProcs) childStart() (time.Time, int64) {
	if p.startUs == 0 {
		return time.Now(), 0
	}
	goAt := time.UnixMicro(p.startUs + 1_000_000)
	if d := time.Until(goAt); d > 0 {
		time.Sleep(d)
	}
	now := time.Now()
	return now, now.UnixMicro() - p.startUs
}

// workerStream is the random stream of worker i of this process: the
// children's workers draw different key sequences.
func (p *benchProcs) workerStream(concurrency, i int) uint64 {
	return uint64(p.index*concurrency + i)
}

// writeAdmissions writes a child's admission log: its offset, then key,
// sent and recv per admission (little-endian).
func (p *benchProcs) writeAdmissions(adm []admission, offsetUs int64) error {
	if p.admissions == "" {
		return nil
	}
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, offsetUs)
	for _, a := range adm {
		_ = binary.Write(&b, binary.LittleEndian, [3]uint32{a.key, a.sent, a.recv})
	}
	return os.WriteFile(p.admissions, b.Bytes(), 0o600)
}

func readAdmissions(path string) ([]admission, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 8 || (len(b)-8)%12 != 0 {
		return nil, fmt.Errorf("%s: not an admission log (%d bytes)", path, len(b))
	}
	off := int64(binary.LittleEndian.Uint64(b))
	out := make([]admission, 0, (len(b)-8)/12)
	for i := 8; i < len(b); i += 12 {
		a := admission{key: binary.LittleEndian.Uint32(b[i:]), sent: binary.LittleEndian.Uint32(b[i+4:]), recv: binary.LittleEndian.Uint32(b[i+8:])}
		a.sent = uint32(int64(a.sent) + off)
		a.recv = uint32(int64(a.recv) + off)
		out = append(out, a)
	}
	return out, nil
}

// runBenchProcesses runs P children and prints their merged result:
// counts add up, ops_per_sec is the sum of the children's, latency
// quantiles are the worst child's, and max_overadmit is computed over
// every child's admissions together.
func runBenchProcesses(ctx context.Context, e *env, args []string, o *benchOptions) error {
	lim, err := o.validate()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ringlimit-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	seed := o.seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	startUs := time.Now().UnixMicro()
	p := o.procs.processes
	results := make([]*benchResult, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for i := range p {
		wg.Go(func() {
			child := append([]string{"bench"}, args...)
			child = append(child, "--processes", "1", "--process-index", strconv.Itoa(i),
				"--admissions-file", filepath.Join(dir, fmt.Sprintf("adm-%d", i)),
				"--start-unix-us", strconv.FormatInt(startUs, 10), "--seed", strconv.FormatUint(seed, 10), "--cpuprofile", "")
			cmd := exec.CommandContext(ctx, self, child...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, e.stderr
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Errorf("bench process %d: %w", i, err)
				return
			}
			var r benchResult
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				errs[i] = fmt.Errorf("bench process %d: %w (%q)", i, err, out.String())
				return
			}
			results[i] = &r
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	res := *results[0]
	res.Processes = p
	res.Ops, res.Allowed, res.Refused, res.Errors, res.OpsPerSec, res.BenchCPUS = 0, 0, 0, 0, 0, 0
	res.ClientRPCs, res.ClientCacheHits, res.LeaseLocal, res.LeasesGranted = 0, 0, 0, 0
	var adm []admission
	for i, r := range results {
		res.Ops += r.Ops
		res.Allowed += r.Allowed
		res.Refused += r.Refused
		res.Errors += r.Errors
		res.OpsPerSec += r.OpsPerSec
		res.BenchCPUS = round(res.BenchCPUS+r.BenchCPUS, 2)
		res.ClientRPCs += r.ClientRPCs
		res.ClientCacheHits += r.ClientCacheHits
		res.LeaseLocal += r.LeaseLocal
		res.LeasesGranted += r.LeasesGranted
		res.DurationS = max(res.DurationS, r.DurationS)
		res.P50Us, res.P90Us, res.P99Us = max(res.P50Us, r.P50Us), max(res.P90Us, r.P90Us), max(res.P99Us, r.P99Us)
		res.P999Us, res.MaxUs = max(res.P999Us, r.P999Us), max(res.MaxUs, r.MaxUs)
		if res.FirstError == "" {
			res.FirstError = r.FirstError
		}
		if r.MaxOveradmit >= 0 {
			a, err := readAdmissions(filepath.Join(dir, fmt.Sprintf("adm-%d", i)))
			if err != nil {
				return err
			}
			adm = append(adm, a...)
		}
	}
	res.OpsPerSec = round(res.OpsPerSec, 0)
	if res.MaxOveradmit >= 0 {
		over, key := overadmitOf(adm, lim)
		res.MaxOveradmit, res.OveradmitKey = over, ""
		if over > 0 {
			res.OveradmitKey = "key index " + strconv.Itoa(int(key))
		}
	}
	return printJSON(e.stdout, &res)
}

// benchProcResult are bench's result fields for processes and leases.
type benchProcResult struct {
	// Processes is --processes, when more than 1.
	Processes int `json:"processes,omitempty"`
	// Leases says whether the fleet client asked for leases (--leases).
	Leases bool `json:"leases"`
	// LeaseLocal counts the calls decided from leases, without an RPC;
	// LeasesGranted the leases the clients received.
	LeaseLocal    int64 `json:"lease_local"`
	LeasesGranted int64 `json:"leases_granted"`
}
