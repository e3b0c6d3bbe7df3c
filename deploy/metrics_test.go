package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rls"
)

// promtool finds promtool, failing (never skipping) when it is absent: the
// checks below are part of the suite, and make test installs it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: run `apt-get install -y prometheus` (Debian; `make test` does it through scripts/services/ensure.sh)")
	}
	return p
}

func runPromtool(t *testing.T, stdin []byte, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// manifestEnvoy is the Envoy rules of the manifest's ConfigMap, as a
// node reads them.
func manifestEnvoy(t *testing.T) *rls.Config {
	t.Helper()
	var cfg rls.Config
	for _, o := range decodeManifest(t).objects {
		if cm, ok := o.(*corev1.ConfigMap); ok && cm.Name == "ringlimit-envoy" {
			for name, data := range cm.Data {
				d, err := rls.Parse(name, []byte(data))
				if err != nil {
					t.Fatalf("ConfigMap ringlimit-envoy %s: %v", name, err)
				}
				cfg.Domains = append(cfg.Domains, d)
			}
		}
	}
	if len(cfg.Domains) == 0 {
		t.Fatal("the manifest's ConfigMap ringlimit-envoy holds no domain")
	}
	return &cfg
}

// nodeMetrics starts two real nodes on 127.0.0.1 (serving Envoy's
// rate-limit service with the manifest's rules, as the fleet does), makes
// calls that are decided locally, forwarded (so the per-peer vectors
// appear), refused and rejected, and Envoy calls, and returns the first
// node's /metrics text.
func nodeMetrics(t *testing.T) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	envoy := manifestEnvoy(t)
	start := func(name string, join ...string) *ringlimit.Node {
		n, err := ringlimit.Start(ctx, ringlimit.Config{
			Name: name, GossipAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
			Profile: "local", Join: join, Timeout: 2 * time.Second, Bounds: limiter.Bounds{MaxKeys: 1000},
			Envoy: envoy, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			n.Close(ctx)
		})
		if err := n.WaitReady(ctx); err != nil {
			t.Fatalf("%s not ready: %v", name, err)
		}
		return n
	}
	a := start("a")
	b := start("b", a.GossipAddr())
	// Wait until both rings hold both nodes: each node names the same
	// owner for a sample of keys, and the sample has keys of both.
	keys := map[string]string{} // owner -> a key it owns
	for deadline := time.Now().Add(20 * time.Second); len(keys) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the two nodes did not agree on a ring of both")
		}
		clear(keys)
		for i := range 64 {
			k := "key-" + strconv.Itoa(i)
			oa, errA := a.Owner(k)
			ob, errB := b.Owner(k)
			if errA != nil || errB != nil || oa != ob {
				clear(keys)
				break
			}
			keys[oa] = k
		}
	}
	lim := limiter.Limit{Uses: 2, Window: time.Minute}
	for _, k := range keys {
		for range 3 { // allowed, allowed, refused; b's key is forwarded
			if _, err := a.ConsumeMany(ctx, []limiter.Entry{{Key: k, Limit: lim}}); err != nil {
				t.Fatalf("consume %s: %v", k, err)
			}
		}
	}
	if _, err := a.ConsumeMany(ctx, []limiter.Entry{{Key: "", Limit: lim}}); err == nil {
		t.Fatal("an empty key was accepted")
	}
	req := &rlsv3.RateLimitRequest{Domain: envoy.Domains[0].Name, HitsAddend: 1, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}}}}
	for range 3 {
		if _, err := a.Envoy().ShouldRateLimit(ctx, req); err != nil {
			t.Fatalf("Envoy ShouldRateLimit: %v", err)
		}
	}
	resp, err := http.Get("http://" + a.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s %v", resp.Status, err)
	}
	return body
}

// seriesNames are the names a PromQL selector can use for the families
// of a /metrics text (a histogram's _bucket, _sum and _count included).
func seriesNames(t *testing.T, text []byte) map[string]bool {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	names := map[string]bool{}
	for name, f := range fams {
		names[name] = true
		switch f.GetType().String() {
		case "HISTOGRAM", "GAUGE_HISTOGRAM":
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case "SUMMARY":
			names[name+"_sum"], names[name+"_count"] = true, true
		}
	}
	return names
}

var (
	promStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promLabels   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)`)
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true,
		"without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true, "Inf": true, "NaN": true}
)

// metricNames returns the metric names a PromQL expression selects: the
// identifiers left once strings, label matchers, ranges and grouping
// label lists are gone, that are neither keywords nor function or
// aggregation names (those are followed by "(").
func metricNames(expr string) []string {
	e := promStrings.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promLabels.ReplaceAllString(e, " ")
	var out []string
	for _, m := range promIdent.FindAllStringSubmatchIndex(e, -1) {
		name := e[m[2]:m[3]]
		if promKeywords[name] || strings.HasPrefix(strings.TrimLeft(e[m[3]:], " \t\n"), "(") {
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// The extractor finds what a typo would hide, and nothing else.
func TestMetricNames(t *testing.T) {
	for expr, want := range map[string]string{
		`sum by (job, instance) (rate(ringlimit_fallbacks_total{job="ringlimit",x=~"a|b"}[5m])) > 0`:                               "ringlimit_fallbacks_total",
		`histogram_quantile(0.99, sum by (le) (rate(ringlimit_decision_seconds_bucket{instance=~"$instance"}[$__rate_interval])))`: "ringlimit_decision_seconds_bucket",
		`ringlimit_ring_members < on (job) group_left () count by (job) (up{job="ringlimit"})`:                                     "ringlimit_ring_members up",
		`sum(rate(a_total[1m] offset 5m)) / sum without (role) (b) and on() c > 1e3`:                                               "a_total b c",
		`count(count by (version) (ringlimit_ring_info)) > bool 1`:                                                                 "ringlimit_ring_info",
	} {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("metricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}

// exprs lists every PromQL expression of the dashboard (panel targets, in
// rows too, and the template variables' label_values queries).
func dashboardExprs(t *testing.T) (exprs []string, titles []string) {
	t.Helper()
	data, err := os.ReadFile("grafana/ringlimit.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Panels     []panel
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana/ringlimit.json: %v", err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("grafana/ringlimit.json: uid %q, title %q, %d panels", d.UID, d.Title, len(d.Panels))
	}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			titles = append(titles, p.Title)
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" || tg.RefID == "" {
					t.Errorf("panel %q: a target without expr or refId", p.Title)
				}
				exprs = append(exprs, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			json.Unmarshal(v.Query, &q.Query)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("template variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q.Query)
		}
		exprs = append(exprs, m[1])
	}
	return exprs, titles
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func ruleExprs(t *testing.T) (exprs, alerts []string) {
	t.Helper()
	data, err := os.ReadFile("prometheus/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("prometheus/rules.yaml: %v", err)
	}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			exprs, alerts = append(exprs, r.Expr), append(alerts, r.Alert)
		}
	}
	return exprs, alerts
}

// A real node's /metrics passes `promtool check metrics`, the rules pass
// `promtool check rules` and their unit tests (each alert fires on trouble
// and stays quiet on a healthy fleet), and every metric the dashboard and
// the rules name is one the node serves, and the README documents every
// ringlimit_ metric served. (Checked by hand: a misspelt metric in a
// panel, a rule threshold changed and the README from before each make
// this test fail; promtool check metrics exits 3 on a counter without
// _total.)
func TestMetricsDashboardRules(t *testing.T) {
	promtool(t)
	text := nodeMetrics(t)
	t.Run("check metrics", func(t *testing.T) { runPromtool(t, text, "check", "metrics") })
	t.Run("check rules", func(t *testing.T) { runPromtool(t, nil, "check", "rules", "prometheus/rules.yaml") })
	t.Run("test rules", func(t *testing.T) { runPromtool(t, nil, "test", "rules", "prometheus/rules_test.yaml") })

	served := seriesNames(t, text)
	for _, want := range []string{"go_goroutines", "process_cpu_seconds_total", "ringlimit_peer_forwards_total", "ringlimit_max_keys", "ratelimit_service_rate_limit_total_hits_total"} {
		if !served[want] {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("%s", text)
	}
	// up is the one series Prometheus makes itself, for every target.
	served["up"] = true
	dash, titles := dashboardExprs(t)
	rules, alerts := ruleExprs(t)
	for what, exprs := range map[string][]string{"grafana/ringlimit.json": dash, "prometheus/rules.yaml": rules} {
		for _, e := range exprs {
			names := metricNames(e)
			if len(names) == 0 {
				t.Errorf("%s: no metric in %q", what, e)
			}
			for _, n := range names {
				if !served[n] {
					t.Errorf("%s: %s (in %q) is not in a node's /metrics", what, n, e)
				}
			}
		}
	}
	// The README's Operating section documents every ringlimit_ metric
	// served, and no longer the lossy ringlimit_ring_version.
	documented := readmeMetricNames(t)
	for name := range served {
		if strings.HasPrefix(name, "ringlimit_") && !strings.HasSuffix(name, "_bucket") && !strings.HasSuffix(name, "_sum") && !strings.HasSuffix(name, "_count") && !documented[name] {
			t.Errorf("the README (Operating ringlimit, Metrics) lacks %s, which a node serves", name)
		}
	}
	if documented["ringlimit_ring_version"] {
		t.Error("the README still documents ringlimit_ring_version")
	}
	// What the issue asks the dashboard to show, and the alerts to catch.
	all := strings.ToLower(strings.Join(titles, "|"))
	for _, topic := range []string{"decisions by result", "latency", "forwards", "batch size", "fallbacks", "hand-offs", "replication", "keys", "members", "by limit", "shadow"} {
		if !strings.Contains(all, topic) {
			t.Errorf("the dashboard has no panel about %s (titles: %s)", topic, all)
		}
	}
	for _, a := range []string{"RinglimitFallbacks", "RinglimitMemberMissing", "RinglimitForwardErrors", "RinglimitKeysNearMax", "RinglimitReplicationLagging", "RinglimitReplicationFailing"} {
		if !slices.Contains(alerts, a) {
			t.Errorf("prometheus/rules.yaml has no alert %s", a)
		}
	}
}
