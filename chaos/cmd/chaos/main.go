// Command chaos runs ringlimit's chaos scenarios against real node
// processes and exits non-zero when a scenario's promise is broken.
//
//	go run ./chaos/cmd/chaos -scenario kill-owner -nodes 5 -duration 30s
//	go run ./chaos/cmd/chaos -scenario all -nodes 5
//	go run ./chaos/cmd/chaos -scenario all -nodes 5 -sabotage   # each check must break
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit/chaos"
)

func main() {
	os.Exit(run())
}

func run() int {
	var names []string
	for _, s := range chaos.Scenarios() {
		names = append(names, s.Name)
	}
	var o chaos.Options
	scenario := flag.String("scenario", "all", "scenario to run: "+strings.Join(names, ", ")+", or all")
	flag.IntVar(&o.Nodes, "nodes", 5, "nodes in the cluster")
	flag.DurationVar(&o.Duration, "duration", 30*time.Second, "load per scenario (faults are scheduled inside it)")
	flag.IntVar(&o.Workers, "workers", 32, "concurrent clients")
	flag.DurationVar(&o.Pace, "pace", 10*time.Millisecond, "each client's pause between calls")
	flag.IntVar(&o.HotKeys, "hot", 8, "hot keys")
	flag.IntVar(&o.Keys, "keys", 300, "cold keys")
	flag.IntVar(&o.Uses, "uses", 20, "sliding-log limit: uses per window")
	flag.DurationVar(&o.Window, "window", 2*time.Second, "sliding-log limit: window")
	flag.DurationVar(&o.Timeout, "timeout", 250*time.Millisecond, "nodes' --timeout (call deadline is this + 100ms)")
	flag.DurationVar(&o.ReplLag, "repl-lag", 100*time.Millisecond, "admissions this long before a SIGKILL may be lost with the owner")
	flag.StringVar(&o.Fallback, "fallback", "", "override every scenario's --fallback (deny, allow, local)")
	flag.StringVar(&o.Binary, "bin", "", "a built ringlimit binary (default: go build ./cmd/node)")
	keep := flag.Bool("keep", false, "keep the work dir (binary, node logs) even when every scenario passed")
	quiet := flag.Bool("q", false, "no progress lines")
	sab := flag.Bool("sabotage", false, "run each scenario with the protection it checks turned off (test-only switches); a run passes when its check breaks")
	flag.IntVar(&o.CrashKeys, "crash-keys", 20, "kill scenarios: keys the victim owns, filled to the limit just before the kill")
	flag.DurationVar(&o.CrashWindow, "crash-window", 8*time.Second, "kill scenarios: the crash keys' window (longer than the kill's convergence)")
	flag.Parse()

	var list []*chaos.Scenario
	if *scenario == "all" {
		list = chaos.Scenarios()
	} else {
		for _, n := range strings.Split(*scenario, ",") {
			s, ok := chaos.Lookup(n)
			if !ok {
				fmt.Fprintf(os.Stderr, "chaos: unknown scenario %q (want %s or all)\n", n, strings.Join(names, ", "))
				return 2
			}
			list = append(list, s)
		}
	}
	if *sab {
		var sl []*chaos.Scenario
		for _, s := range list {
			if !s.Contrast { // kill-owner-no-replicas is kill-owner sabotaged
				sl = append(sl, s.Sabotaged())
			}
		}
		list = sl
	}
	if !*quiet {
		o.Log = os.Stderr
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	start := time.Now()
	r, err := chaos.NewRunner(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	failed := 0
	var summary []string
	for _, s := range list {
		res, err := r.Run(ctx, s)
		if res != nil {
			chaos.Print(os.Stdout, res)
		} else {
			fmt.Printf("\n== %s: HARNESS ERROR: %v\n", s.Name, err)
		}
		verdict := "PASS"
		switch {
		case err != nil:
			verdict, failed = "HARNESS ERROR", failed+1
		case res.Contrast && res.Passed:
			verdict = "CAUGHT (sabotaged: the check broke)"
		case res.Contrast:
			verdict, failed = "NOT CAUGHT (sabotaged, yet the check held)", failed+1
		case !res.Passed:
			verdict, failed = "PROMISE BROKEN", failed+1
		case !res.Promise:
			verdict = "REPORTED"
		}
		summary = append(summary, fmt.Sprintf("%-27s %s", s.Name, verdict))
		if ctx.Err() != nil {
			break
		}
	}
	r.Close(*keep || failed > 0)
	fmt.Printf("\n== summary (%d nodes, %.0fs)\n", o.Nodes, time.Since(start).Seconds())
	for _, l := range summary {
		fmt.Println("   " + l)
	}
	if failed > 0 {
		fmt.Printf("   %d scenario(s) failed; work dir kept: %s\n", failed, r.WorkDir())
		return 1
	}
	return 0
}
