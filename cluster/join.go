package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// ErrJoin is wrapped by Start's error when no Join address could be reached
// before its context was done.
var ErrJoin = errors.New("cluster: join failed")

// resolveSeeds expands the Join list to ip:port addresses: a DNS name stands
// for every address it resolves to. Unresolvable entries are reported in
// err but do not stop the others.
func resolveSeeds(ctx context.Context, seeds []string) (addrs []string, err error) {
	var errs []error
	seen := map[string]bool{}
	for _, s := range seeds {
		host, port, e := net.SplitHostPort(s)
		if e != nil {
			errs = append(errs, e)
			continue
		}
		ips, e := net.DefaultResolver.LookupHost(ctx, host)
		if e != nil {
			errs = append(errs, fmt.Errorf("resolve %s: %w", s, e))
			continue
		}
		for _, ip := range ips {
			a := net.JoinHostPort(ip, port)
			if !seen[a] {
				seen[a] = true
				addrs = append(addrs, a)
			}
		}
	}
	return addrs, errors.Join(errs...)
}

// joinTargets returns the resolved seeds other than this node.
func (c *Cluster) joinTargets(ctx context.Context) (targets []string, resolved int, err error) {
	addrs, err := resolveSeeds(ctx, c.cfg.Join)
	for _, a := range addrs {
		if a != c.self {
			targets = append(targets, a)
		}
	}
	return targets, len(addrs), err
}

// joinUntil joins the Join list, retrying with backoff until one address
// answers or ctx is done.
func (c *Cluster) joinUntil(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		targets, resolved, err := c.joinTargets(ctx)
		switch {
		case len(targets) > 0:
			var n int
			n, err = c.ml.Join(targets)
			if n > 0 {
				c.log.Debug("joined", "contacted", n, "of", targets)
				return nil
			}
		case resolved > 0:
			// Every seed is this node: it is the first one.
			return nil
		case err == nil:
			err = errors.New("join list resolved to no addresses")
		}
		c.log.Debug("join failed; retrying", "attempt", attempt, "join", c.cfg.Join, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %v after %d attempts: %w (last: %v)", ErrJoin, c.cfg.Join, attempt, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// rejoinLoop joins the seeds again every RejoinInterval. After a partition
// heals neither side probes the other (each thinks the other dead), so this
// is what merges them. It re-joins even seeds it sees alive: the seed may
// still think this node dead, and a join is a full state exchange that
// carries this node's refutation to it.
func (c *Cluster) rejoinLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.RejoinInterval)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		targets, _, err := c.joinTargets(ctx)
		if err != nil {
			c.log.Debug("rejoin: resolve", "err", err)
		}
		if len(targets) == 0 || c.isClosed() {
			continue
		}
		n, err := c.ml.Join(targets)
		c.log.Debug("rejoin", "targets", targets, "contacted", n, "err", err)
	}
}
