// Command sim runs the deterministic cluster simulator over a range of
// seeds (see package sim). Its last line is one JSON object summing the
// run; it exits 1 when any seed fails, after printing, for each failing
// seed, what broke, the command that replays it and a compact trace of
// the failing key.
//
//	go run ./sim/cmd/sim -seeds 2000 -start 1 -nodes 0
//
// With -known FILE (one seed a line; # starts a comment), the seeds listed
// are open findings: their failures are reported as known and do not fail
// the run, but a listed seed that passes does ("fixed: remove it from the
// list"), so the list only shrinks. Any other failure fails the run.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/internal/sabotage"
	"github.com/ringlimit/ringlimit/sim"
)

func main() {
	seeds := flag.Int("seeds", 100, "how many seeds to run")
	start := flag.Uint64("start", 1, "the first seed")
	nodes := flag.Int("nodes", 0, "initial cluster size, 3 to 7 (0: each seed chooses)")
	workers := flag.Int("workers", 0, "seeds run at once (0: one per CPU)")
	verbose := flag.Bool("v", false, "a line per seed")
	stopAt := flag.Int("stop-after", 0, "stop after this many failed seeds (0: run them all)")
	detail := flag.Int("detail", 5, "failed seeds described in full, with a trace of the failing key; later ones get a line")
	knownFile := flag.String("known", "", "a file of seeds that are known open findings (see the package doc)")
	leases := flag.Bool("leases", false, "the lease mode: every node also holds leases for the calls made through it")
	buckets := flag.Bool("buckets", false, "every key's limit a token bucket of the plan's uses per window, not a sliding log")
	flag.Parse()
	known, err := readKnown(*knownFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		os.Exit(2)
	}
	if *nodes != 0 && (*nodes < 3 || *nodes > 7) {
		fmt.Fprintln(os.Stderr, "sim: -nodes must be 3 to 7 (or 0)")
		os.Exit(2)
	}
	if *seeds < 1 {
		fmt.Fprintln(os.Stderr, "sim: -seeds must be at least 1")
		os.Exit(2)
	}
	sab := os.Getenv(sabotage.Env)
	if sab != "" {
		fmt.Fprintf(os.Stderr, "sim: test-only sabotage switches on: %v\n", sabotage.Active())
	}
	opt := sim.Options{Nodes: *nodes, Leases: *leases, Buckets: *buckets}
	mode := ""
	if *leases {
		mode += " -leases"
	}
	if *buckets {
		mode += " -buckets"
	}
	var sum sim.Summary
	var fixed []uint64
	began := time.Now()
	sim.RunSeeds(*start, *seeds, *workers, opt, func(r *sim.Result) bool {
		sum.Add(r)
		if *verbose {
			fmt.Printf("seed %d: nodes %d, faults %d, calls %d, admitted %d, errors %d, steps %d, exact %d, bound %d, failed %v\n",
				r.Seed, r.Plan.Nodes, len(r.Events), r.Check.Calls, r.Check.Admitted, r.Check.Errors, r.Steps, r.Check.MaxExact, r.Check.MaxBound, r.Failed())
		}
		if known[r.Seed] {
			if !r.Failed() {
				fixed = append(fixed, r.Seed)
				return false
			}
			sum.Known++
			fmt.Printf("seed %d failed, a known open finding: %s\n", r.Seed, r.Reason())
			return false
		}
		if r.Failed() {
			// The first few in full (with a traced rerun); then one line each.
			if sum.Failed-sum.Known <= *detail {
				fmt.Print(sim.Describe(r, opt))
			} else {
				fmt.Printf("seed %d FAILED: %s\n", r.Seed, r.Reason())
			}
			fmt.Printf("  replay: %s%s\n", sim.Replay(r.Seed, *nodes, sab), mode)
		}
		return *stopAt > 0 && sum.Failed-sum.Known >= *stopAt
	})
	for _, seed := range fixed {
		fmt.Printf("seed %d passed though %s lists it as a known failure: fixed; remove it from the list\n", seed, *knownFile)
	}
	fmt.Fprintf(os.Stderr, "sim: %d seeds in %v\n", sum.Seeds, time.Since(began).Round(time.Millisecond))
	out, _ := json.Marshal(sum)
	fmt.Println(string(out))
	if sum.Failed > sum.Known || len(fixed) > 0 {
		os.Exit(1)
	}
}

// readKnown reads a -known file: seeds, one a line, # comments.
func readKnown(path string) (map[uint64]bool, error) {
	known := map[uint64]bool{}
	if path == "" {
		return known, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-known: %w", err)
	}
	for i, line := range strings.Split(string(data), "\n") {
		if j := strings.IndexByte(line, '#'); j >= 0 {
			line = line[:j]
		}
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		seed, err := strconv.ParseUint(line, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("-known %s line %d: %q is not a seed", path, i+1, line)
		}
		known[seed] = true
	}
	return known, nil
}
