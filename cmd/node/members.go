package main

import (
	"context"
	"fmt"
)

// memberJSON is a member as `members` prints it (the same fields as the
// HTTP API's GET /v1/members).
type memberJSON struct {
	Name       string `json:"name"`
	GossipAddr string `json:"gossip_addr"`
	GRPCAddr   string `json:"grpc_addr"`
	State      string `json:"state"`
}

func runMembers(ctx context.Context, e *env, args []string) error {
	var co clientOptions
	fs := newFlagSet("members", "members --server H:P", e.stderr)
	co.register(fs)
	if err := parse(fs, args, e.getenv, ""); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	c, err := co.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, co.timeout)
	defer cancel()
	ms, err := c.Members(ctx)
	if err != nil {
		return err
	}
	out := make([]memberJSON, len(ms))
	for i, m := range ms {
		out[i] = memberJSON{m.Name, m.GossipAddr, m.GRPCAddr, m.State}
	}
	return printJSON(e.stdout, out)
}

func runOwner(ctx context.Context, e *env, args []string) error {
	var co clientOptions
	fs := newFlagSet("owner", "owner --server H:P KEY", e.stderr)
	co.register(fs)
	if err := parse(fs, args, e.getenv, ""); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want exactly one KEY, got %d arguments", fs.NArg())
	}
	c, err := co.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, co.timeout)
	defer cancel()
	m, err := c.Owner(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(e.stdout, m.Name)
	return err
}
