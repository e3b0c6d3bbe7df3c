package chaos

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Print writes a scenario's table: the run, the faults, the counts, one row
// per check, notes, and (when it failed) the tails of the node logs.
func Print(w io.Writer, res *Result) {
	fmt.Fprintf(w, "\n== %s: %s\n", res.Scenario, res.Doc)
	fmt.Fprintf(w, "   %d nodes, --replicas %d, --fallback %s, limit %s, call deadline %v, load %.1fs\n",
		res.Nodes, res.Replicas, res.Fallback, res.Limit, res.Deadline, res.Load.Seconds())
	if res.Protection != "" {
		fmt.Fprintf(w, "   protection checked: %s (check: %s)\n", res.Protection, res.Guard)
	}
	if res.Contrast {
		fmt.Fprintf(w, "   SABOTAGED: %s\n", res.Sabotage)
	}
	for _, f := range res.Faults {
		ex := ""
		if f.Excused {
			ex = ", calls to it excused"
		}
		fmt.Fprintf(w, "   fault: %-9s %-3s %6.2fs .. %6.2fs%s\n", f.Kind, f.Node, f.From.Seconds(), f.To.Seconds(), ex)
	}
	rep := res.Report
	fmt.Fprintf(w, "   calls %d, answered %d, allowed %d; excused %d%s; latency p50 %v p99 %v max %v\n",
		rep.Calls, rep.Answered, rep.Allowed, rep.Excused, kinds(rep.ExcusedErrors), rep.P50.Round(10*time.Microsecond), rep.P99.Round(10*time.Microsecond), rep.Max.Round(10*time.Microsecond))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "   CHECK\tGOT\tWANT\tRESULT\n")
	for _, c := range res.Checks {
		verdict := "ok"
		switch {
		case !c.OK && c.Guard && res.Contrast:
			verdict = "BROKEN, as it must be (sabotaged)"
		case c.Guard && res.Contrast:
			verdict = "NOT BROKEN although sabotaged"
		case !c.OK && c.Promise:
			verdict = "BROKEN"
		case !c.OK:
			verdict = "not met (reported)"
		case !c.Promise:
			verdict = "reported"
		}
		fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\n", c.Name, c.Got, c.Want, verdict)
	}
	tw.Flush()
	for k, msg := range rep.ErrorSample {
		fmt.Fprintf(w, "   error sample %s: %s\n", k, msg)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(w, "   %s\n", n)
	}
	switch {
	case res.Err != nil:
		fmt.Fprintf(w, "   RESULT: HARNESS ERROR: %v\n", res.Err)
	case res.Contrast && res.Caught:
		fmt.Fprintf(w, "   RESULT: CAUGHT (the check broke with its protection off)\n")
	case res.Contrast:
		fmt.Fprintf(w, "   RESULT: NOT CAUGHT: the check held with its protection off (node logs: %s)\n", res.LogDir)
	case res.Passed && !res.Promise:
		fmt.Fprintf(w, "   RESULT: REPORTED (contrast run, no promise)\n")
	case res.Passed:
		fmt.Fprintf(w, "   RESULT: PASS\n")
	default:
		fmt.Fprintf(w, "   RESULT: PROMISE BROKEN (node logs: %s)\n", res.LogDir)
	}
	if res.Tails != "" {
		fmt.Fprintf(w, "%s\n", indent(res.Tails))
	}
}

func indent(s string) string {
	return "   " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n   ")
}
