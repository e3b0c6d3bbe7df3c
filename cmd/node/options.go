package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Every flag of every subcommand is read, in this order of precedence,
// from the command line, from the environment variable RINGLIMIT_<FLAG>
// (upper case, dashes as underscores: --gossip-addr is
// RINGLIMIT_GOSSIP_ADDR), from the --config YAML file (serve only; its
// keys are the flag names), and else takes its default.

// envPrefix starts every environment variable the binary reads.
const envPrefix = "RINGLIMIT_"

// envName is the environment variable of a flag: "gossip-addr" is
// RINGLIMIT_GOSSIP_ADDR.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// usageError is a bad command line, flag value or configuration; the
// binary exits 2 (exitUsage) on it.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// newFlagSet returns a flag set that reports errors instead of exiting,
// printing usage (with each flag's variable) to out. The flag package's
// own print of a parse error is dropped: run prints the error, once.
func newFlagSet(name, synopsis string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: ringlimit %s\n\n", synopsis)
		fmt.Fprintf(out, "Every flag can also be set by its environment variable (flag > environment%s > default).\n\n",
			map[bool]string{true: " > --config file", false: ""}[fs.Lookup("config") != nil])
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(out, "  --%s", f.Name)
			if name != "" {
				fmt.Fprintf(out, " %s", name)
			}
			fmt.Fprintf(out, "  (%s)\n    \t%s", envName(f.Name), strings.ReplaceAll(usage, "\n", "\n    \t"))
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
				fmt.Fprintf(out, " (default %s)", f.DefValue)
			}
			fmt.Fprintln(out)
		})
		fmt.Fprint(out, "\n"+exitCodesHelp)
	}
	return fs
}

// parse reads args, then the environment (getenv; a variable set to ""
// counts as unset) for every flag not on the command line, then, when
// configFlag names a flag whose value is a path, that YAML file for the
// flags still unset.
func parse(fs *flag.FlagSet, args []string, getenv func(string) string, configFlag string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
			set[f.Name] = true
		}
	})
	if len(errs) > 0 {
		return &usageError{errors.Join(errs...)}
	}
	if configFlag == "" {
		return nil
	}
	path := fs.Lookup(configFlag).Value.String()
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return usagef("--%s: %w", configFlag, err)
	}
	vals, err := readConfig(path, data, fs, configFlag)
	if err != nil {
		return &usageError{err}
	}
	names := make([]string, 0, len(vals))
	for name := range vals {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if set[name] {
			continue
		}
		v := vals[name]
		if err := fs.Set(name, v.value); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %s: %w", path, v.line, name, err))
		}
	}
	if len(errs) > 0 {
		return &usageError{errors.Join(errs...)}
	}
	return nil
}

type configValue struct {
	value string
	line  int
}

// readConfig reads a YAML mapping whose keys are flag names (except the
// config flag itself). A key that names no flag is an error, as is a
// value that is neither a scalar nor a list of scalars (a list is joined
// with commas: `join: [a:1, b:2]` is `--join a:1,b:2`).
func readConfig(path string, data []byte, fs *flag.FlagSet, configFlag string) (map[string]configValue, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // an empty file sets nothing
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of flag names to values", path, root.Line)
	}
	out := map[string]configValue{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		name := k.Value
		if name == configFlag || fs.Lookup(name) == nil {
			return nil, fmt.Errorf("%s:%d: unknown field %q (the keys are serve's flag names, e.g. gossip-addr)", path, k.Line, name)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s:%d: field %q set twice", path, k.Line, name)
		}
		var s string
		switch v.Kind {
		case yaml.ScalarNode:
			s = v.Value
		case yaml.SequenceNode:
			parts := make([]string, 0, len(v.Content))
			for _, item := range v.Content {
				if item.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("%s:%d: %s: want a list of plain values", path, item.Line, name)
				}
				parts = append(parts, item.Value)
			}
			s = strings.Join(parts, ",")
		default:
			return nil, fmt.Errorf("%s:%d: %s: want a value or a list of values", path, v.Line, name)
		}
		out[name] = configValue{value: s, line: k.Line}
	}
	return out, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
