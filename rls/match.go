package rls

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringlimit/ringlimit/limiter"
)

// units maps envoy's unit names to windows and to the response's enum.
var units = map[string]struct {
	window time.Duration
	unit   rlsv3.RateLimitResponse_RateLimit_Unit
}{
	"second": {time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
	"minute": {time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	"hour":   {time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	"day":    {24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	"week":   {7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
	"month":  {30 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH},
	"year":   {365 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_YEAR},
}

// unitLimit is where a unit becomes a limit. Under fixed-window (the
// default) second to week are windows aligned to the Unix epoch, as
// envoyproxy/ratelimit counts them (a day is a UTC day, a week starts on
// a Thursday); month and year are calendar months and years in UTC, with
// their real lengths, where envoyproxy/ratelimit counts 30 and 365 days
// from the epoch.
func unitLimit(unit rlsv3.RateLimitResponse_RateLimit_Unit, window time.Duration, alg limiter.Algorithm, uses int64) limiter.Limit {
	if alg == limiter.FixedWindow {
		switch unit {
		case rlsv3.RateLimitResponse_RateLimit_MONTH:
			return limiter.CalendarLimit(uses, limiter.CalendarMonth, nil)
		case rlsv3.RateLimitResponse_RateLimit_YEAR:
			return limiter.CalendarLimit(uses, limiter.CalendarYear, nil)
		}
	}
	return limiter.Limit{Algorithm: alg, Uses: uses, Window: window}
}

func unitWindow(unit string) (time.Duration, error) {
	u, ok := units[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q (want second, minute, hour, day, week, month or year)", unit)
	}
	return u.window, nil
}

// rule is a compiled rate_limit.
type rule struct {
	limit      limiter.Limit // Uses is 0 for requests_per_unit: 0
	unit       rlsv3.RateLimitResponse_RateLimit_Unit
	unlimited  bool
	shadow     bool
	name       string
	replaces   []string
	multiplier uint32 // unit_multiplier of a request's override; 0 when none
	quota      bool   // quota_mode
	debit      bool   // debit: hits are usage after the fact
	detailed   bool   // detailed_metric
	statKey    string // the metric key of the rule: its path of key[_value] joined by "."
}

func (r *rule) current() *rlsv3.RateLimitResponse_RateLimit {
	if r.unlimited {
		return nil
	}
	out := &rlsv3.RateLimitResponse_RateLimit{Name: r.name, RequestsPerUnit: uint32(r.limit.Uses), Unit: r.unit}
	if r.multiplier > 1 {
		out.UnitMultiplier = wrapperspb.UInt32(r.multiplier)
	}
	return out
}

type pair struct{ key, value string }

type wildcard struct {
	key, prefix string
	node        *node
}

// node is one level of a domain's rules: exact key=value matches, value
// prefix ("*") matches in config order, and key-only matches. The fields
// after rule describe the rule that leads to this node from its parent.
type node struct {
	exact     map[pair]*node
	wildcards []wildcard
	anyValue  map[string]*node
	rule      *rule
	seg       string // "key" or "key_value" (the value as configured, "*" kept): envoy's stat path element
	v2m       bool   // value_to_metric
	share     bool   // share_threshold (a wildcard rule)
	pattern   string // the configured value, for share_threshold
}

// compiled is a validated Config.
type compiled struct {
	domains        map[string]*node
	algorithm      limiter.Algorithm
	prefix         string
	clock          limiter.Clock
	maxDescriptors int
	headers        bool
	limitHeader    string
	remainHeader   string
	resetHeader    string
	maxMetricKeys  int
	shadowMode     bool // Config.ShadowMode
}

func compile(c Config) (*compiled, error) {
	out := &compiled{domains: map[string]*node{}, prefix: c.KeyPrefix, clock: c.Clock,
		maxDescriptors: c.MaxDescriptors, headers: c.ResponseHeaders, maxMetricKeys: c.MaxMetricKeys, shadowMode: c.ShadowMode,
		limitHeader: c.LimitHeader, remainHeader: c.RemainingHeader, resetHeader: c.ResetHeader}
	if out.prefix == "" {
		out.prefix = DefaultKeyPrefix
	}
	switch {
	case c.MaxDescriptors < 0:
		return nil, &ConfigError{Path: "MaxDescriptors", Reason: fmt.Sprintf("must be 0 (the default, %d) or more, got %d", DefaultMaxDescriptors, c.MaxDescriptors)}
	case c.MaxDescriptors == 0:
		out.maxDescriptors = DefaultMaxDescriptors
	}
	switch {
	case c.MaxMetricKeys < 0:
		return nil, &ConfigError{Path: "MaxMetricKeys", Reason: fmt.Sprintf("must be 0 (the default, %d) or more, got %d", DefaultMaxMetricKeys, c.MaxMetricKeys)}
	case c.MaxMetricKeys == 0:
		out.maxMetricKeys = DefaultMaxMetricKeys
	}
	for _, h := range []struct {
		v   *string
		def string
	}{{&out.limitHeader, DefaultLimitHeader}, {&out.remainHeader, DefaultRemainingHeader}, {&out.resetHeader, DefaultResetHeader}} {
		if *h.v == "" {
			*h.v = h.def
		}
	}
	if out.clock == nil {
		out.clock = limiter.RealClock
	}
	alg := c.Algorithm
	if alg == "" {
		alg = DefaultAlgorithm
	}
	a, err := limiter.ParseAlgorithm(alg)
	if err != nil {
		return nil, &ConfigError{Path: "Algorithm", Reason: err.Error()}
	}
	if a == limiter.Concurrency {
		// Envoy asks once per request and never says when it ends: a slot
		// would be held until its TTL, whatever the request did.
		return nil, &ConfigError{Path: "Algorithm", Reason: "concurrency is not supported by the rate-limit service (Envoy never reports a request's end, so a slot could not be given back)"}
	}
	out.algorithm = a
	sources := map[string]string{}
	for i, d := range c.Domains {
		file := d.Source
		if file == "" {
			file = "Domains[" + strconv.Itoa(i) + "]"
		}
		if d.Name == "" {
			return nil, &ConfigError{File: file, Path: "domain", Reason: "must not be empty"}
		}
		if prev, ok := sources[d.Name]; ok {
			return nil, &ConfigError{File: file, Path: "domain", Reason: fmt.Sprintf("duplicate domain %q (also in %s)", d.Name, prev)}
		}
		sources[d.Name] = file
		dc := &domainCtx{domain: d.Name, names: map[string]bool{}}
		root, err := compileLevel(d.Descriptors, file, "descriptors", "", a, dc)
		if err != nil {
			return nil, err
		}
		for _, r := range dc.refs {
			if !dc.names[r.name] {
				return nil, &ConfigError{File: file, Path: r.path, Reason: fmt.Sprintf("no limit of domain %q is named %q", d.Name, r.name)}
			}
		}
		out.domains[d.Name] = root
	}
	return out, nil
}

// domainCtx collects a domain's limit names and the replaces that name
// them, so an unknown name is refused at load.
type domainCtx struct {
	domain string
	names  map[string]bool
	refs   []struct{ path, name string }
}

func compileLevel(ds []Descriptor, file, path, statPath string, alg limiter.Algorithm, dc *domainCtx) (*node, error) {
	n := &node{exact: map[pair]*node{}, anyValue: map[string]*node{}}
	seen := map[pair]string{}
	for i, d := range ds {
		p := path + "[" + strconv.Itoa(i) + "]"
		if d.Key == "" {
			return nil, &ConfigError{File: file, Path: p + ".key", Reason: "must not be empty"}
		}
		id := pair{d.Key, d.Value}
		if prev, ok := seen[id]; ok {
			return nil, &ConfigError{File: file, Path: p, Reason: fmt.Sprintf("duplicate rule for key %q value %q (also %s)", d.Key, d.Value, prev)}
		}
		seen[id] = p
		if d.Debit && d.RateLimit == nil {
			return nil, &ConfigError{File: file, Path: p + ".debit", Reason: "needs a rate_limit on the same rule"}
		}
		if d.ShareThreshold && !strings.HasSuffix(d.Value, "*") {
			return nil, &ConfigError{File: file, Path: p + ".share_threshold", Reason: fmt.Sprintf("needs a wildcard value (one ending in \"*\"), got value %q", d.Value)}
		}
		seg := d.Key
		if d.Value != "" {
			seg += "_" + d.Value
		}
		stat := seg
		if statPath != "" {
			stat = statPath + "." + seg
		}
		child, err := compileLevel(d.Descriptors, file, p+".descriptors", stat, alg, dc)
		if err != nil {
			return nil, err
		}
		child.seg, child.v2m, child.share, child.pattern = seg, d.ValueToMetric, d.ShareThreshold, d.Value
		if d.RateLimit != nil {
			r, cerr := compileRule(*d.RateLimit, d.ShadowMode, alg)
			if cerr != nil {
				cerr.Path = p + ".rate_limit." + cerr.Path
				cerr.File = file
				return nil, cerr
			}
			r.quota, r.detailed, r.statKey, r.debit = d.QuotaMode, d.DetailedMetric, stat, d.Debit
			r.limit.Name = limitName(dc.domain, stat)
			if r.name != "" {
				dc.names[r.name] = true
			}
			for j, name := range r.replaces {
				dc.refs = append(dc.refs, struct{ path, name string }{p + ".rate_limit.replaces[" + strconv.Itoa(j) + "].name", name})
			}
			child.rule = r
		}
		switch {
		case d.Value == "":
			n.anyValue[d.Key] = child
		case strings.HasSuffix(d.Value, "*"):
			n.wildcards = append(n.wildcards, wildcard{key: d.Key, prefix: strings.TrimSuffix(d.Value, "*"), node: child})
			n.exact[id] = child // a literal "*" value matches exactly too
		default:
			n.exact[id] = child
		}
	}
	return n, nil
}

// limitName names a rule's limit for metrics: its domain and descriptor
// keys as envoy's statistics name them ("DOMAIN.key_value.key"), all from
// the configuration (never a request's values), cut to
// limiter.MaxNameBytes on a character boundary.
func limitName(domain, stat string) string {
	name := strings.ToValidUTF8(domain+"."+stat, "\uFFFD")
	if len(name) <= limiter.MaxNameBytes {
		return name
	}
	n := limiter.MaxNameBytes
	for n > 0 && !utf8.RuneStart(name[n]) {
		n--
	}
	return name[:n]
}

func compileRule(r RateLimit, shadow bool, alg limiter.Algorithm) (*rule, *ConfigError) {
	out := &rule{unlimited: r.Unlimited, shadow: shadow, name: r.Name, replaces: r.Replaces}
	for i, name := range r.Replaces {
		if name == "" {
			return nil, &ConfigError{Path: "replaces[" + strconv.Itoa(i) + "].name", Reason: "must not be empty"}
		}
		if name == r.Name {
			return nil, &ConfigError{Path: "replaces[" + strconv.Itoa(i) + "].name", Reason: "a limit cannot replace itself"}
		}
	}
	if r.Unlimited {
		if r.Unit != "" {
			return nil, &ConfigError{Path: "unit", Reason: "must not be set when unlimited is true"}
		}
		return out, nil
	}
	u, ok := units[strings.ToLower(r.Unit)]
	if !ok {
		_, err := unitWindow(r.Unit)
		return nil, &ConfigError{Path: "unit", Reason: err.Error()}
	}
	out.unit = u.unit
	out.limit = unitLimit(u.unit, u.window, alg, int64(r.RequestsPerUnit))
	return out, nil
}

// how a level of a request descriptor matched a rule.
type how uint8

const (
	byExact    how = iota // key and value
	byWildcard            // key and a value prefix ("*")
	byKey                 // key alone
)

// step finds the rule entry e walks to from n, as envoy's reference
// service does: an exact key=value rule, then a value-prefix ("*") rule,
// then a key-only rule.
func (n *node) step(e pair) (*node, how) {
	if next := n.exact[e]; next != nil {
		return next, byExact
	}
	for _, w := range n.wildcards {
		if w.key == e.key && strings.HasPrefix(e.value, w.prefix) {
			return w.node, byWildcard
		}
	}
	if next := n.anyValue[e.key]; next != nil {
		return next, byKey
	}
	return nil, byKey
}

// found is the outcome of matching one request descriptor.
type found struct {
	rule *rule
	// metric is the key of its metrics (after the domain): the rule's
	// statKey, or, with detailed_metric or value_to_metric, one built
	// from the request's values, as envoy builds it.
	metric string
	// entries are those of the counter's key: the request's, with the
	// value of a share_threshold level replaced by the wildcard.
	entries []pair
}

// match finds the rule of a request descriptor: walk the entries level by
// level (see step); the limit applies only when the walk reaches the
// descriptor's last entry on a rule that has one (a descriptor deeper or
// shallower than the rules gets no limit).
func (root *node) match(entries []pair) found {
	cur := root
	var v2m, share bool
	for i, e := range entries {
		next, h := cur.step(e)
		if next == nil {
			return found{}
		}
		v2m = v2m || (next.v2m && h != byExact)
		share = share || (next.share && h == byWildcard)
		if i == len(entries)-1 {
			if next.rule == nil {
				return found{}
			}
			f := found{rule: next.rule, metric: next.rule.statKey, entries: entries}
			if v2m || share || next.rule.detailed {
				root.detail(&f)
			}
			return f
		}
		cur = next
	}
	return found{}
}

// detail walks the matched path again to build the counter entries of a
// share_threshold rule and the metric key of a detailed_metric or
// value_to_metric one, as envoy does: detailed_metric names every entry
// key_value (a shared one key_wildcard); value_to_metric puts the
// request's value where the rule has none or a wildcard.
func (root *node) detail(f *found) {
	var metric strings.Builder
	shared, cloned := f.entries, false
	cur := root
	for i, e := range f.entries {
		next, h := cur.step(e)
		shares := next.share && h == byWildcard
		if shares {
			if !cloned {
				shared, cloned = slices.Clone(f.entries), true
			}
			shared[i].value = next.pattern
		}
		if i > 0 {
			metric.WriteByte('.')
		}
		switch {
		case shares:
			metric.WriteString(next.seg)
		case f.rule.detailed || (next.v2m && h != byExact):
			metric.WriteString(e.key + "_" + e.value)
		default:
			metric.WriteString(next.seg)
		}
		cur = next
	}
	f.entries, f.metric = shared, metric.String()
}

// key builds the counter's key: prefix + domain + "/" + key=value pairs
// joined by "/", each part escaped so no two descriptors share a key.
func (c *compiled) key(domain string, entries []pair) string {
	var b strings.Builder
	b.WriteString(c.prefix)
	escape(&b, domain)
	for _, e := range entries {
		b.WriteByte('/')
		escape(&b, e.key)
		b.WriteByte('=')
		escape(&b, e.value)
	}
	return b.String()
}

// escape writes s with '%', '/', '=' and the hash-tag braces '{' '}'
// percent-encoded (a brace would make the ring route on part of the key).
func escape(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%', '/', '=', '{', '}':
			fmt.Fprintf(b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
}
