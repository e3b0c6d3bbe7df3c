package main

import (
	"context"
	"flag"
	"strings"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc/api"
)

// limitList is a repeatable --limit.
type limitList []string

func (l *limitList) String() string     { return strings.Join(*l, " ") }
func (l *limitList) Set(s string) error { *l = append(*l, s); return nil }

var _ flag.Value = (*limitList)(nil)

// runReset forgets counters of keys in the fleet: those of each --limit
// (named by its algorithm and window), or with --all every counter of each
// key. It prints {"reset": N}.
func runReset(ctx context.Context, e *env, args []string) error {
	var co clientOptions
	var limits limitList
	var algorithm string
	var all bool
	fs := newFlagSet("reset", "reset --server H:P (--limit 5/1m [--limit ...] | --all) KEY [KEY...]", e.stderr)
	co.register(fs)
	fs.Var(&limits, "limit", "`USES/WINDOW` naming a counter of every key, e.g. 5/1m or token-bucket:100/1s (its algorithm and window name it); repeat for more")
	fs.StringVar(&algorithm, "algorithm", "", "`ALGORITHM` of every --limit: sliding-log (default), sliding-window, token-bucket or fixed-window; overrides a prefix of --limit")
	fs.BoolVar(&all, "all", false, "forget every counter of each key, whatever its algorithm and window (instead of --limit)")
	if err := parse(fs, args, e.getenv, ""); err != nil {
		return err
	}
	switch {
	case len(limits) == 0 && !all:
		return usagef("--limit is required (e.g. --limit 5/1m), or --all to forget every window of the keys")
	case len(limits) > 0 && all:
		return usagef("--all forgets every window: give it or --limit, not both")
	case fs.NArg() == 0:
		return usagef("want at least one KEY")
	}
	lims := make([]limiter.Limit, len(limits))
	for i, text := range limits {
		l, err := limiter.ParseLimit(text)
		if err != nil {
			return usagef("--limit: %w", err)
		}
		if algorithm != "" {
			if l.Algorithm, err = limiter.ParseAlgorithm(algorithm); err != nil {
				return usagef("--algorithm: %w", err)
			}
		}
		lims[i] = l
	}
	c, err := co.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, co.timeout)
	defer cancel()
	if err := c.Reset(ctx, fs.Args(), lims...); err != nil {
		return err
	}
	return printJSON(e.stdout, api.JSONResetResult{Reset: fs.NArg()})
}
