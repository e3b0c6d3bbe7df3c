package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Options configure a chaos run. Zero fields take the documented defaults.
type Options struct {
	// Nodes in the cluster. Default 5.
	Nodes int
	// Duration of the load per scenario (faults are scheduled inside it;
	// the load runs on past it until the faults have played out). Default
	// 30 s.
	Duration time.Duration
	// Workers: concurrent clients. Default 32.
	Workers int
	// Pace: each worker's pause between calls. Default 10 ms.
	Pace time.Duration
	// HotKeys and Keys: the hot set and the cold keys. Defaults 8 and 300.
	HotKeys, Keys int
	// HotShare: the share of calls to hot keys. Default 0.5.
	HotShare float64
	// Uses and Window: the sliding-log limit. Default 20 per 2 s.
	Uses   int
	Window time.Duration
	// Timeout: the nodes' --timeout. Default 250 ms. Calls' deadline is
	// Timeout + 100 ms.
	Timeout time.Duration
	// ReplLag: how far before a SIGKILL an admission may lie and still be
	// lost with the owner (its replication in flight). Default 100 ms.
	ReplLag time.Duration
	// CrashKeys and CrashWindow: in the kill scenarios and leave, up to
	// CrashKeys keys the victim owns are filled to Uses per CrashWindow
	// just before the kill (or SIGTERM) and called through the others
	// afterwards (crash.go), so that a crash without replication, or a
	// leave without hand-off, loses uses the checker sees.
	// Defaults 20 and 8 s; CrashWindow must exceed the kill's convergence
	// (< 3 s) by enough for the calls after it.
	CrashKeys   int
	CrashWindow time.Duration
	// Fallback overrides each scenario's --fallback ("" keeps it).
	Fallback string
	// Binary: a built ringlimit; "" builds ./cmd/node.
	Binary string
	// WorkDir receives the binary and node logs; "" makes a temp dir.
	WorkDir string
	// Seed for key choices. Default 1.
	Seed uint64
	// Log receives progress lines. Default io.Discard.
	Log io.Writer
}

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Nodes, 5)
	def(&o.Workers, 32)
	def(&o.HotKeys, 8)
	def(&o.Keys, 300)
	def(&o.Uses, 20)
	def(&o.CrashKeys, 20)
	defD(&o.CrashWindow, 8*time.Second)
	defD(&o.Duration, 30*time.Second)
	defD(&o.Pace, 10*time.Millisecond)
	defD(&o.Window, 2*time.Second)
	defD(&o.Timeout, 250*time.Millisecond)
	defD(&o.ReplLag, 100*time.Millisecond)
	if o.HotShare <= 0 {
		o.HotShare = 0.5
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o
}

// Runner runs scenarios with one built binary.
type Runner struct {
	opt    Options
	work   string
	ownDir bool
	fw     *Firewall
	fwErr  error
}

// NewRunner builds the binary (unless Options.Binary is set) and prepares
// the work directory.
func NewRunner(ctx context.Context, opt Options) (*Runner, error) {
	opt = opt.withDefaults()
	r := &Runner{opt: opt, work: opt.WorkDir}
	if r.work == "" {
		d, err := os.MkdirTemp("", "ringlimit-chaos-")
		if err != nil {
			return nil, fmt.Errorf("chaos: work dir: %w", err)
		}
		r.work, r.ownDir = d, true
	}
	// Nodes may run as other users: they must reach the binary.
	if err := os.Chmod(r.work, 0o755); err != nil {
		r.Close(false)
		return nil, fmt.Errorf("chaos: work dir: %w", err)
	}
	if r.opt.Binary == "" {
		fmt.Fprintf(opt.Log, "building ./cmd/node ...\n")
		bin, err := Build(ctx, "", r.work)
		if err != nil {
			r.Close(false) // nothing ran: nothing to keep
			return nil, err
		}
		r.opt.Binary = bin
	}
	r.fw, r.fwErr = NewFirewall(ctx)
	return r, nil
}

// WorkDir holds the binary and the node logs.
func (r *Runner) WorkDir() string { return r.work }

// Close removes any firewall rule left and, unless keepLogs (a scenario
// failed, or the caller asked), the temporary work directory it made
// (ringlimit-chaos-*: the binary, node logs, histories). It returns the
// directory kept, "" when none was: a failing run prints it.
func (r *Runner) Close(keepLogs bool) (kept string) {
	if r.fw != nil {
		_ = r.fw.Heal(context.Background())
	}
	if !r.ownDir || keepLogs {
		return r.work
	}
	if err := os.RemoveAll(r.work); err != nil {
		fmt.Fprintf(r.opt.Log, "chaos: removing %s: %v\n", r.work, err)
		return r.work
	}
	return ""
}

// run is one scenario's state.
type run struct {
	r    *Runner
	opt  Options
	sc   *Scenario
	c    *Cluster
	h    *History
	lc   LoadConfig
	logf func(format string, args ...any)

	mu     sync.Mutex
	faults []Fault
	notes  []string

	// Set by fault scripts for the judges.
	target   string                              // the disturbed node
	faultAt  time.Duration                       // when the fault began
	healAt   time.Duration                       // when it ended (partition heal)
	restart  time.Duration                       // when the killed node was started again
	healConv time.Duration                       // heal to converged membership
	crash    *crashPlan                          // kill: the crash keys
	claims   *claims                             // partition: the cut-off node's Owner answers
	owners   map[string]string                   // key -> owner before the fault
	changed  map[string]map[string]time.Duration // convergence watch
}

func (r *run) note(format string, args ...any) {
	r.mu.Lock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
	r.mu.Unlock()
	r.logf(format, args...)
}

// fault opens a fault interval now and returns its closer.
func (r *run) fault(kind, node string, excused bool) func() {
	r.mu.Lock()
	i := len(r.faults)
	r.faults = append(r.faults, Fault{Kind: kind, Node: node, From: r.h.Now(), To: -1, Excused: excused})
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.faults[i].To = r.h.Now()
		r.mu.Unlock()
	}
}

func (r *run) closedFaults() []Fault {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]Fault(nil), r.faults...)
	for i := range out {
		if out[i].To < 0 {
			out[i].To = r.h.Now()
		}
	}
	return out
}

// at sleeps until offset d of the load.
func (r *run) at(ctx context.Context, d time.Duration) error {
	wait := d - r.h.Now()
	if wait <= 0 {
		return nil
	}
	select {
	case <-time.After(wait):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hotOwner asks a usable node for the owner of the hottest key and records
// the hot keys' owners (the cold keys' were recorded before the load).
func (r *run) hotOwner(ctx context.Context) (string, error) {
	up := r.c.Up()
	if len(up) == 0 {
		return "", fmt.Errorf("chaos: no usable node")
	}
	owners, err := r.c.Owners(ctx, up[0], r.lc.Hot)
	if err != nil {
		return "", err
	}
	for k, o := range owners {
		r.owners[k] = o
	}
	return owners[r.lc.Hot[0]], nil
}

// kill SIGKILLs node name (excused until restart marks it usable again).
func (r *run) kill(name string) (func(), error) {
	r.c.SetUp(name, false)
	end := r.fault("kill", name, true)
	if err := r.c.Proc(name).Signal(syscall.SIGKILL); err != nil {
		return end, err
	}
	_ = r.c.Proc(name).Wait(context.Background())
	return end, nil
}

// restartNode starts a stopped slot again with its name and ports, waits until
// it is ready and every usable node sees it, and marks it usable.
func (r *run) restartNode(ctx context.Context, name string) error {
	p := r.c.Proc(name)
	if err := r.c.Start(ctx, p, true); err != nil {
		return err
	}
	want := append(r.c.Up(), name)
	if err := r.c.WaitMembers(ctx, want, want, 20*time.Second); err != nil {
		return err
	}
	r.c.SetUp(name, true)
	return nil
}

// watchOwners polls every node in via, every 20 ms, for the owner of each
// key until it is no longer from (or limit passes), recording when each
// node's answer changed.
func (r *run) watchOwners(ctx context.Context, via []string, keys []string, from string, limit time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	changed := map[string]map[string]time.Duration{}
	for _, v := range via {
		changed[v] = map[string]time.Duration{}
	}
	for {
		pending := 0
		for _, v := range via {
			for _, k := range keys {
				if _, ok := changed[v][k]; ok {
					continue
				}
				now := r.h.Now()
				if o, err := r.c.Owner(ctx, v, k); err == nil && o != from && o != "" {
					changed[v][k] = now
				} else {
					pending++
				}
			}
		}
		if pending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			r.note("owner watch: %d (node, key) pairs still answered %s after %v", pending, from, limit)
			r.changed = changed
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.changed = changed
}

func (r *Runner) logDir(name string) (string, error) {
	d := filepath.Join(r.work, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", fmt.Errorf("chaos: log dir: %w", err)
	}
	return d, nil
}

func hotAndCold(o Options) (hot, cold []string) {
	for i := range o.HotKeys {
		hot = append(hot, "hot-"+strconv.Itoa(i))
	}
	for i := range o.Keys {
		cold = append(cold, fmt.Sprintf("key-%03d", i))
	}
	return hot, cold
}
