package deploy_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeSection returns the README's text from the heading to the next
// heading of the same or a higher level (lines in code fences are no
// headings: a shell comment starts with "# " too).
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	level := len(strings.Fields(heading)[0])
	var out []string
	in, fence := false, false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(line, "#") {
			if l := len(line) - len(strings.TrimLeft(line, "#")); strings.HasPrefix(line[l:], " ") {
				if in && l <= level {
					break
				}
				in = in || line == heading
			}
		}
		if in {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		t.Fatalf("README has no %q", heading)
	}
	return strings.Join(out, "\n")
}

// readmeMetricNames are the ringlimit_ names the README's "Operating
// ringlimit" documents in backticks: the Metrics table, and the tables of
// parts with metrics of their own (Envoy's rate-limit service).
func readmeMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, n := range regexp.MustCompile("`(ringlimit_[a-z0-9_]+)").FindAllStringSubmatch(readmeSection(t, "## Operating ringlimit"), -1) {
		out[n[1]] = true
	}
	return out
}

// The README says what make test does to the machine, and stays true to
// the script: every Debian package scripts/services/ensure.sh may install
// is named, and so are its edits of pg_hba.conf and of MariaDB's root
// password, and the chaos suite's nftables rules on lo. (Checked by hand:
// with the README's text from before, and with a package added to
// ensure.sh, this fails.)
func TestReadmeTestCommand(t *testing.T) {
	script, err := os.ReadFile("../scripts/services/ensure.sh")
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, m := range regexp.MustCompile(`(?m)(?:apt_install|missing\+=\()\s*((?:--[a-z-]+\s+)*)([a-z0-9][a-z0-9+.-]+)\)?`).FindAllStringSubmatch(string(script), -1) {
		if !slices.Contains(pkgs, m[2]) {
			pkgs = append(pkgs, m[2])
		}
	}
	if len(pkgs) < 5 {
		t.Fatalf("found only %v in ensure.sh: the pattern lost them", pkgs)
	}
	two := readmeSection(t, "## The two commands")
	for _, p := range pkgs {
		if !strings.Contains(two, "`"+p+"`") {
			t.Errorf("the README does not say that make test may install %s", p)
		}
	}
	for _, want := range []struct{ inScript, inReadme string }{
		{"pg_hba.conf", "host all all 127.0.0.1/32 trust"},
		{"PASSWORD('')", "empty password"},
		{"apt-get update", "apt-get update"},
		{"IS_ROOT", "root"},
	} {
		if strings.Contains(string(script), want.inScript) && !strings.Contains(two, want.inReadme) {
			t.Errorf("ensure.sh does %q, and the README's make test text does not say %q", want.inScript, want.inReadme)
		}
	}
	netfault, err := os.ReadFile("../chaos/netfault.go")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(netfault), "ringlimit_chaos_") {
		for _, want := range []string{"nftables", "ringlimit_chaos_", "`lo`"} {
			if !strings.Contains(two, want) {
				t.Errorf("the chaos suite adds nftables rules, and the README's make test text lacks %q", want)
			}
		}
	}
}
