package rls

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/ringlimit/ringlimit/limiter"
)

// Defaults of Config.
const (
	// DefaultAlgorithm counts every limit: fixed windows aligned to the
	// clock, as envoyproxy/ratelimit counts them, so counts and
	// duration_until_reset agree with it (months and years are calendar
	// ones). "sliding-window" has the same cost per key without letting
	// twice the limit through around a window's edge.
	DefaultAlgorithm = "fixed-window"
	// DefaultKeyPrefix starts every key the service counts.
	DefaultKeyPrefix = "envoy/"
	// DefaultMaxDescriptors bounds the descriptors of one request. Envoy
	// sends one per rate_limits action that applies to a route, a handful
	// in practice; 64 leaves room without letting one request fan out
	// into thousands of counter calls.
	DefaultMaxDescriptors = 64
	// DefaultMaxMetricKeys bounds the metric keys built from request
	// values (detailed_metric, value_to_metric, limit overrides).
	DefaultMaxMetricKeys = 1000
	// The RateLimit headers' names, as in envoyproxy/ratelimit
	// (LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER).
	DefaultLimitHeader     = "RateLimit-Limit"
	DefaultRemainingHeader = "RateLimit-Remaining"
	DefaultResetHeader     = "RateLimit-Reset"
)

// Config configures the service: the rule sets (one per domain) and how
// descriptors become ringlimit entries.
type Config struct {
	// Domains are the rule sets; Load reads them from envoy ratelimit YAML
	// files. Two with the same name are an error (envoy's reference service
	// rejects them too, unless told to merge).
	Domains []Domain
	// Algorithm counts every limit: "fixed-window" (default),
	// "sliding-window", "token-bucket" or "sliding-log". The window is the rule's unit and
	// the uses its requests_per_unit.
	Algorithm string
	// KeyPrefix starts every key: prefix + domain + "/" + key=value pairs
	// joined by "/". Default "envoy/".
	KeyPrefix string
	// Clock reads the time for duration_until_reset; give it the store's
	// clock. Default: the process clock.
	Clock limiter.Clock
	// MaxDescriptors bounds the descriptors of one request; past it the
	// call fails with ResourceExhausted naming "descriptors". Default
	// DefaultMaxDescriptors (64); negative is an error.
	MaxDescriptors int
	// ResponseHeaders adds the RateLimit headers (LimitHeader,
	// RemainingHeader, ResetHeader) of the descriptor closest to its
	// limit to every answer's response_headers_to_add, as
	// envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED does. Default
	// off.
	ResponseHeaders bool
	// LimitHeader, RemainingHeader and ResetHeader name those headers.
	// Defaults RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset.
	LimitHeader, RemainingHeader, ResetHeader string
	// MaxMetricKeys bounds the metric keys built from request values
	// (detailed_metric, value_to_metric, limit overrides); past it, a
	// descriptor is counted under its rule's own key. Default
	// DefaultMaxMetricKeys (1000); negative is an error.
	MaxMetricKeys int
	// ShadowMode is envoyproxy/ratelimit's process-wide SHADOW_MODE: every
	// request is counted as usual, descriptors keep their statuses, and
	// the overall code of a request over a limit is OK, counted in
	// ratelimit_service_global_shadow_mode_total. A store in shadow mode
	// (limiter.Shadow) gets the same answers without it; a node's
	// --shadow sets both. Default off.
	ShadowMode bool
}

// Domain is one YAML file of envoy's ratelimit format.
type Domain struct {
	// Name is the file's "domain"; a request names it.
	Name string
	// Descriptors are the top-level rules.
	Descriptors []Descriptor
	// Source is the file it came from, for error messages ("" when built
	// in Go).
	Source string
}

// Descriptor is one rule: a key, an optional value, an optional limit and
// nested rules for the next entry of a request's descriptor.
type Descriptor struct {
	// Key must match the entry's key; required.
	Key string
	// Value, when set, must match the entry's value exactly; a value ending
	// in "*" matches values with that prefix. Unset: any value, each
	// counted separately.
	Value string
	// RateLimit, when set, is the limit of a request descriptor that ends
	// at this rule.
	RateLimit *RateLimit
	// ShadowMode counts as usual but always answers OK.
	ShadowMode bool
	// QuotaMode marks the limit as a quota: over it, the descriptor's
	// status is OVER_LIMIT, but the request is OVER_LIMIT only when every
	// quota descriptor of the request is over and no other descriptor
	// is (envoyproxy/ratelimit's quota_mode).
	QuotaMode bool
	// DetailedMetric names the limit's metrics by the request's values
	// (domain, then key_value of every entry) rather than by the rule,
	// as in envoy. It is the only way, with ValueToMetric, for request
	// values to reach the metrics' labels; Config.MaxMetricKeys bounds
	// how many such keys are kept.
	DetailedMetric bool
	// ValueToMetric puts the request's value of this entry into the
	// metric key where the rule has no value or a wildcard one
	// (envoyproxy/ratelimit's value_to_metric).
	ValueToMetric bool
	// ShareThreshold, on a wildcard rule (Value ending in "*"), makes all
	// the values the wildcard matches share one counter (and one metric
	// key) instead of one each (envoyproxy/ratelimit's share_threshold).
	ShareThreshold bool
	// Descriptors are the nested rules.
	Descriptors []Descriptor
}

// RateLimit is a rule's limit.
type RateLimit struct {
	// Unit is second, minute, hour, day, week, month (30 days) or year
	// (365 days); case does not matter. Required unless Unlimited.
	Unit string
	// RequestsPerUnit is the limit; 0 refuses every request (a block
	// list, as in envoy).
	RequestsPerUnit uint32
	// Unlimited answers OK without counting; Unit must then be empty.
	Unlimited bool
	// Name names the limit for Replaces.
	Name string
	// Replaces lists names of limits this one replaces when both match
	// descriptors of one request: the replaced ones are not counted. Each
	// must be the Name of a limit of the same domain.
	Replaces []string
}

// ConfigError reports a bad configuration, naming the file, the line and
// the field's path ("descriptors[1].rate_limit.unit"). It matches
// limiter.ErrInvalid.
type ConfigError struct {
	// File is the YAML file, or "domain NAME" for a Domain built in Go.
	File string
	// Line is the line in File, or 0 when unknown.
	Line int
	// Path is the field, e.g. "descriptors[0].descriptors[2].key".
	Path string
	// Reason says what is wrong.
	Reason string
}

// Error returns "rls: FILE:LINE: PATH: REASON".
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString("rls: ")
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Is makes errors.Is(err, limiter.ErrInvalid) true.
func (e *ConfigError) Is(target error) bool { return target == limiter.ErrInvalid }

// Load reads envoy ratelimit YAML files. Each path is a file or a
// directory, whose *.yaml and *.yml files (not starting with ".") are read
// in name order; subdirectories are not. Symlinks are followed, so a
// mounted Kubernetes ConfigMap (edge.yaml -> ..data/edge.yaml) loads like
// a plain directory; Service.Watch reloads it when the kubelet swaps
// "..data". The Config's other fields are
// left at their defaults.
func Load(paths ...string) (Config, error) {
	files, err := configFiles(paths)
	if err != nil {
		return Config{}, err
	}
	var cfg Config
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return Config{}, &ConfigError{File: f, Reason: err.Error()}
		}
		d, err := Parse(f, data)
		if err != nil {
			return Config{}, err
		}
		cfg.Domains = append(cfg.Domains, d)
	}
	return cfg, cfg.Validate()
}

// configFiles lists the files Load reads from paths.
func configFiles(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, &ConfigError{File: p, Reason: err.Error()}
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, &ConfigError{File: p, Reason: err.Error()}
		}
		n := len(files)
		for _, e := range ents {
			name := e.Name()
			// Names starting with "." are skipped: hidden files, and the
			// kubelet's "..data" link and "..2026_..." directories behind
			// a ConfigMap volume, whose keys appear as symlinks
			// (edge.yaml -> ..data/edge.yaml). A symlink counts as the
			// regular file it points to; one that points nowhere (a
			// removed key's link, for a moment during an update) is
			// skipped.
			if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
				continue
			}
			f := filepath.Join(p, name)
			if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() {
				files = append(files, f)
			} else if err != nil && e.Type()&os.ModeSymlink == 0 {
				return nil, &ConfigError{File: f, Reason: err.Error()}
			}
		}
		if len(files) == n {
			return nil, &ConfigError{File: p, Reason: "directory holds no .yaml or .yml file"}
		}
	}
	if len(files) == 0 {
		return nil, &ConfigError{Reason: "no configuration file given"}
	}
	return files, nil
}

// Parse reads one YAML document of envoy's ratelimit format; name is the
// file name used in errors. Unknown keys are errors, as in envoy.
func Parse(name string, data []byte) (Domain, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Domain{}, &ConfigError{File: name, Reason: "not YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	p := parser{file: name}
	d := Domain{Source: name}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return Domain{}, &ConfigError{File: name, Path: "domain", Reason: "must not be empty (the file is empty)"}
	}
	root := doc.Content[0]
	if root.Kind == yaml.SequenceNode {
		// A list of domains is the commonest slip: say so, not only "map".
		return Domain{}, p.err(root, "", "must be a map (domain, descriptors), not a YAML list: one domain per file")
	}
	err := p.mapping(root, "", map[string]func(*yaml.Node, string) error{
		"domain":      func(n *yaml.Node, path string) (err error) { d.Name, err = p.str(n, path); return },
		"descriptors": func(n *yaml.Node, path string) (err error) { d.Descriptors, err = p.descriptors(n, path); return },
	})
	if err != nil {
		return Domain{}, err
	}
	if d.Name == "" {
		return Domain{}, &ConfigError{File: name, Line: root.Line, Path: "domain", Reason: "must not be empty"}
	}
	return d, nil
}

// parser walks a yaml.Node tree, so every error carries a line and a path.
type parser struct{ file string }

func (p parser) err(n *yaml.Node, path, format string, args ...any) error {
	return &ConfigError{File: p.file, Line: n.Line, Path: path, Reason: fmt.Sprintf(format, args...)}
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// mapping calls the field's function for each key of a map; unknown and
// repeated keys are errors.
func (p parser) mapping(n *yaml.Node, path string, fields map[string]func(*yaml.Node, string) error) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return p.err(n, path, "must be a map")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		fn, ok := fields[k.Value]
		if !ok {
			known := make([]string, 0, len(fields))
			for f := range fields {
				known = append(known, f)
			}
			slices.Sort(known)
			return p.err(k, join(path, k.Value), "unknown key (want one of %s)", strings.Join(known, ", "))
		}
		if seen[k.Value] {
			return p.err(k, join(path, k.Value), "repeated key")
		}
		seen[k.Value] = true
		if err := fn(v, join(path, k.Value)); err != nil {
			return err
		}
	}
	return nil
}

func (p parser) str(n *yaml.Node, path string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", p.err(n, path, "must be a string")
	}
	if n.Tag == "!!null" {
		return "", nil
	}
	return n.Value, nil
}

func (p parser) boolean(n *yaml.Node, path string) (bool, error) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		return false, p.err(n, path, "must be true or false, got %q", n.Value)
	}
	return b, nil
}

func (p parser) uint32(n *yaml.Node, path string) (uint32, error) {
	var u uint32
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&u) != nil {
		return 0, p.err(n, path, "must be a whole number from 0 to 4294967295, got %q", n.Value)
	}
	return u, nil
}

func (p parser) seq(n *yaml.Node, path string, each func(*yaml.Node, string) error) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return p.err(n, path, "must be a list")
	}
	for i, c := range n.Content {
		if err := each(c, path+"["+strconv.Itoa(i)+"]"); err != nil {
			return err
		}
	}
	return nil
}

func (p parser) descriptors(n *yaml.Node, path string) ([]Descriptor, error) {
	var out []Descriptor
	err := p.seq(n, path, func(c *yaml.Node, path string) error {
		var d Descriptor
		err := p.mapping(c, path, map[string]func(*yaml.Node, string) error{
			"key":             func(n *yaml.Node, path string) (err error) { d.Key, err = p.str(n, path); return },
			"value":           func(n *yaml.Node, path string) (err error) { d.Value, err = p.str(n, path); return },
			"shadow_mode":     func(n *yaml.Node, path string) (err error) { d.ShadowMode, err = p.boolean(n, path); return },
			"quota_mode":      func(n *yaml.Node, path string) (err error) { d.QuotaMode, err = p.boolean(n, path); return },
			"detailed_metric": func(n *yaml.Node, path string) (err error) { d.DetailedMetric, err = p.boolean(n, path); return },
			"value_to_metric": func(n *yaml.Node, path string) (err error) { d.ValueToMetric, err = p.boolean(n, path); return },
			"share_threshold": func(n *yaml.Node, path string) (err error) { d.ShareThreshold, err = p.boolean(n, path); return },
			"descriptors":     func(n *yaml.Node, path string) (err error) { d.Descriptors, err = p.descriptors(n, path); return },
			"rate_limit":      func(n *yaml.Node, path string) (err error) { d.RateLimit, err = p.rateLimit(n, path); return },
		})
		if err == nil && d.Key == "" {
			err = p.err(c, join(path, "key"), "must not be empty")
		}
		out = append(out, d)
		return err
	})
	return out, err
}

func (p parser) rateLimit(n *yaml.Node, path string) (*RateLimit, error) {
	var r RateLimit
	err := p.mapping(n, path, map[string]func(*yaml.Node, string) error{
		"unit":              func(n *yaml.Node, path string) (err error) { r.Unit, err = p.str(n, path); return },
		"requests_per_unit": func(n *yaml.Node, path string) (err error) { r.RequestsPerUnit, err = p.uint32(n, path); return },
		"unlimited":         func(n *yaml.Node, path string) (err error) { r.Unlimited, err = p.boolean(n, path); return },
		"name":              func(n *yaml.Node, path string) (err error) { r.Name, err = p.str(n, path); return },
		"replaces": func(n *yaml.Node, path string) error {
			return p.seq(n, path, func(c *yaml.Node, path string) error {
				var name string
				err := p.mapping(c, path, map[string]func(*yaml.Node, string) error{
					"name": func(n *yaml.Node, path string) (err error) { name, err = p.str(n, path); return },
				})
				if err == nil && name == "" {
					err = p.err(c, join(path, "name"), "must not be empty")
				}
				r.Replaces = append(r.Replaces, name)
				return err
			})
		},
	})
	if err != nil {
		return nil, err
	}
	if _, uerr := unitWindow(r.Unit); !r.Unlimited && uerr != nil {
		return nil, p.err(n, join(path, "unit"), "%v", uerr)
	}
	return &r, nil
}

// Validate checks the configuration without building a service: the
// algorithm, duplicate domains, and each domain's rules.
func (c Config) Validate() error {
	_, err := compile(c)
	return err
}
