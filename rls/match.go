package rls

import (
	"fmt"
	"strconv"
	"strings"
	"time"

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
// prefix ("*") matches in config order, and key-only matches.
type node struct {
	exact     map[pair]*node
	wildcards []wildcard
	anyValue  map[string]*node
	rule      *rule
}

// compiled is a validated Config.
type compiled struct {
	domains   map[string]*node
	algorithm limiter.Algorithm
	prefix    string
	clock     limiter.Clock
}

func compile(c Config) (*compiled, error) {
	out := &compiled{domains: map[string]*node{}, prefix: c.KeyPrefix, clock: c.Clock}
	if out.prefix == "" {
		out.prefix = DefaultKeyPrefix
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
		root, err := compileLevel(d.Descriptors, file, "descriptors", a)
		if err != nil {
			return nil, err
		}
		out.domains[d.Name] = root
	}
	return out, nil
}

func compileLevel(ds []Descriptor, file, path string, alg limiter.Algorithm) (*node, error) {
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
		child, err := compileLevel(d.Descriptors, file, p+".descriptors", alg)
		if err != nil {
			return nil, err
		}
		if d.RateLimit != nil {
			r, cerr := compileRule(*d.RateLimit, d.ShadowMode, alg)
			if cerr != nil {
				cerr.Path = p + ".rate_limit." + cerr.Path
				cerr.File = file
				return nil, cerr
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
	out.limit = limiter.Limit{Algorithm: alg, Uses: int64(r.RequestsPerUnit), Window: u.window}
	return out, nil
}

// match finds the rule of a request descriptor, as envoy's reference
// service does: walk the entries level by level, at each level preferring
// an exact key=value rule, then a value-prefix ("*") rule, then a key-only
// rule; the limit applies only when the walk reaches the descriptor's last
// entry on a rule that has one (a descriptor deeper or shallower than the
// rules gets no limit).
func (root *node) match(entries []pair) *rule {
	cur := root
	for i, e := range entries {
		next := cur.exact[e]
		if next == nil {
			for _, w := range cur.wildcards {
				if w.key == e.key && strings.HasPrefix(e.value, w.prefix) {
					next = w.node
					break
				}
			}
		}
		if next == nil {
			next = cur.anyValue[e.key]
		}
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			return next.rule
		}
		cur = next
	}
	return nil
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
