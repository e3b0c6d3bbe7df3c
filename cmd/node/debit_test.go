package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// consume --debit records usage after the fact through a node in this
// process: it passes the limit, exits 0 while the budget was not already
// exceeded and 1 once it was; a burst rides in --limit.
func TestConsumeDebitAndBurst(t *testing.T) {
	n, err := ringlimit.Start(t.Context(), ringlimit.Config{Name: "cli-debit", GossipAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
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
	if code, out, errs := cli("peek", "--limit", "fixed-window:100/1h", "--cost", "150", "--debit", "tokens"); code != exitOK {
		t.Fatalf("peek --debit of 150 of 100: exit %d %s %s; want 0", code, out, errs)
	}
	if code, out, errs := cli("consume", "--limit", "fixed-window:100/1h", "--cost", "150", "--debit", "tokens"); code != exitOK {
		t.Fatalf("consume --debit of 150 of 100: exit %d %s %s; want 0 (not exceeded before)", code, out, errs)
	}
	if code, out, errs := cli("consume", "--limit", "fixed-window:100/1h", "--cost", "150", "--debit", "tokens"); code != exitRefused {
		t.Fatalf("a second debit: exit %d %s %s; want 1 (exceeded before)", code, out, errs)
	}
	if code, out, errs := cli("consume", "--limit", "fixed-window:100/1h", "tokens"); code != exitRefused {
		t.Fatalf("a use after the debits: exit %d %s %s; want 1", code, out, errs)
	}
	if code, _, errs := cli("consume", "--limit", "fixed-window:100/1h", "--cost", "150", "tokens"); code != exitUsage {
		t.Fatalf("a cost of 150 of 100 without --debit: exit %d %s; want 2", code, errs)
	}
	if code, out, errs := cli("consume", "--limit", "token-bucket:1/1h,burst=5", "--cost", "5", "b"); code != exitOK {
		t.Fatalf("5 of a burst of 5: exit %d %s %s; want 0", code, out, errs)
	}
	if code, _, errs := cli("consume", "--limit", "5/1h,burst=5", "b"); code != exitUsage {
		t.Fatalf("a burst on a sliding log: exit %d %s; want 2", code, errs)
	}
}
