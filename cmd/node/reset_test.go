package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// reset forgets a key's counter through a node in this process, so the
// next consume passes; --all forgets every window; without --limit or
// --all, or with both, it is a usage error.
func TestResetCommand(t *testing.T) {
	n, err := ringlimit.Start(t.Context(), ringlimit.Config{Name: "cli-reset", GossipAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		HTTPAddr: "-", Profile: "local", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Close(ctx)
	})
	cli := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(t.Context(), append(args[:1:1], append([]string{"--server", n.GRPCAddr()}, args[1:]...)...), &env{stdout: &out, stderr: &errb, getenv: envOf(nil)})
		return code, out.String(), errb.String()
	}
	for _, lim := range []string{"1/1h", "token-bucket:1/1h"} {
		for _, k := range []string{"ann", "bob"} {
			if code, out, errs := cli("consume", "--limit", lim, k); code != exitOK {
				t.Fatalf("consume %s %s: exit %d %s %s", lim, k, code, out, errs)
			}
		}
	}
	if code, _, _ := cli("consume", "--limit", "1/1h", "ann"); code != exitRefused {
		t.Fatalf("a second use of 1: exit %d, want 1", code)
	}
	code, out, errs := cli("reset", "--limit", "1/1h", "ann")
	if code != exitOK || strings.TrimSpace(out) != `{"reset":1}` {
		t.Fatalf("reset --limit 1/1h ann: exit %d %q %s; want 0 {\"reset\":1}", code, out, errs)
	}
	if code, out, errs := cli("consume", "--limit", "1/1h", "ann"); code != exitOK {
		t.Fatalf("consume after the reset: exit %d %s %s; want 0", code, out, errs)
	}
	if code, _, _ := cli("consume", "--limit", "token-bucket:1/1h", "ann"); code != exitRefused {
		t.Fatalf("ann's token bucket after a reset of its sliding log: exit %d, want 1 (not reset)", code)
	}
	if code, out, errs := cli("reset", "--all", "ann", "bob"); code != exitOK || strings.TrimSpace(out) != `{"reset":2}` {
		t.Fatalf("reset --all ann bob: exit %d %q %s", code, out, errs)
	}
	for _, args := range [][]string{{"consume", "--limit", "token-bucket:1/1h", "ann"}, {"consume", "--limit", "1/1h", "bob"}} {
		if code, out, errs := cli(args...); code != exitOK {
			t.Fatalf("%v after reset --all: exit %d %s %s; want 0", args, code, out, errs)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"reset", "ann"}, "--limit is required"},
		{[]string{"reset", "--all", "--limit", "1/1h", "ann"}, "not both"},
		{[]string{"reset", "--limit", "1/1h"}, "KEY"},
		{[]string{"reset", "--limit", "1/1x", "ann"}, "--limit"},
	} {
		if code, _, errs := cli(c.args...); code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d %q; want 2 saying %q", c.args, code, errs, c.want)
		}
	}
}
