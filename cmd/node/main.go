// Command ringlimit runs a ringlimit node and talks to a fleet of them.
//
//	ringlimit serve   [flags]            run a node (gossip, gRPC and HTTP APIs)
//	ringlimit consume [flags] KEY...     take one use of every key, as one batch
//	ringlimit peek    [flags] KEY...     what consume would answer, recording nothing
//	ringlimit reset   [flags] KEY...     forget counters of keys (unlock a user)
//	ringlimit members [flags]            the cluster's members, as JSON
//	ringlimit owner   [flags] KEY        the name of the node that owns KEY
//	ringlimit bench   [flags]            a closed-loop load generator
//	ringlimit version
//
// Every flag is also read from RINGLIMIT_<FLAG> (upper case, dashes as
// underscores); serve also reads a --config YAML file keyed by flag name.
// Precedence: flag > environment > config file > default. `ringlimit
// CMD --help` lists a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/ringlimit/ringlimit/limiter"
)

// env is what a subcommand may touch of the process, so tests can run it.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

type command struct {
	name, synopsis, about string
	run                   func(ctx context.Context, e *env, args []string) error
}

var commands = []command{
	{"serve", "serve [flags]", "run a node", runServe},
	{"consume", "consume --server H:P --limit 5/1m [--algorithm A] [--cost N] [--debit] KEY [KEY...]", "take uses of keys (one batch); exit 0 allowed, 1 refused", runConsume},
	{"peek", "peek --server H:P --limit 5/1m [--algorithm A] [--cost N] [--debit] KEY [KEY...]", "answer what consume would, recording nothing", runPeek},
	{"reset", "reset --server H:P (--limit 5/1m [--limit ...] | --all) KEY [KEY...]", "forget counters of keys (unlock a user); prints {\"reset\": N}", runReset},
	{"members", "members --server H:P", "print the cluster's members as a JSON array", runMembers},
	{"owner", "owner --server H:P KEY", "print the name of the node that owns KEY", runOwner},
	{"bench", "bench --server H:P[,H:P...] [--concurrency 64] [--keys 10000] [--duration 10s] [--limit 100/1s] [--zipf S] [--redis ADDR] [--mode M]", "closed-loop load generator; prints one JSON object", runBench},
	{"version", "version", "print the version", runVersion},
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], &env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}))
}

// Exit codes. The README's table (under "The CLI") lists the same, and
// TestExitCodesDocumented keeps the two equal.
const (
	exitOK      = 0
	exitRefused = 1 // consume/peek: the verdict was a refusal
	exitUsage   = 2 // usage or configuration error; the text is on stderr
	exitBind    = 3 // serve: a listening address cannot be bound
	exitJoin    = 4 // serve: no --join node answered within --join-timeout
	exitFailed  = 5 // any other failure: a call failed, the node failed, shutdown was cut short
)

// exitCodesHelp ends every usage text.
const exitCodesHelp = `Exit codes: 0 ok (allowed), 1 refused, 2 usage or configuration error, 3 cannot bind,
4 cannot join within --join-timeout, 5 any other failure (a call, the node, its shutdown).
`

// errRefused makes a command exit 1 without printing an error.
var errRefused = errors.New("refused")

// exitError gives err its exit code. reported says the error was already
// written out (logged by the node), so run does not print it again.
type exitError struct {
	code     int
	err      error
	reported bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode is the exit code of a command's error.
func exitCode(err error) int {
	var ee *exitError
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errRefused):
		return exitRefused
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue), errors.Is(err, limiter.ErrInvalid):
		// A bad flag, or a request the library or the server refused
		// as invalid (it names the field).
		return exitUsage
	}
	return exitFailed
}

func run(ctx context.Context, args []string, e *env) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		usage(e.stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, e, args[1:])
		code := exitCode(err)
		var ee *exitError
		if code != exitOK && code != exitRefused && !(errors.As(err, &ee) && ee.reported) {
			fmt.Fprintf(e.stderr, "ringlimit %s: %v\n", c.name, err)
		}
		return code
	}
	fmt.Fprintf(e.stderr, "ringlimit: unknown command %q\n\n", args[0])
	usage(e.stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ringlimit COMMAND [flags] [args]")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.about)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "`ringlimit COMMAND --help` lists a command's flags; each is also read from RINGLIMIT_<FLAG>.")
	fmt.Fprint(w, "\n"+exitCodesHelp)
}

// version is the module version the binary was built from, with the VCS
// revision when the build recorded one.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "dev"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
		if s.Key == "vcs.modified" && s.Value == "true" {
			v += "+dirty"
		}
	}
	return v + " " + bi.GoVersion
}

func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlagSet("version", "version", e.stderr)
	if err := parse(fs, args, e.getenv, ""); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "ringlimit", version())
	return nil
}
