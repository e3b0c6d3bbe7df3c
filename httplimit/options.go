package httplimit

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
)

// KeyFunc returns the client key of a request: the counter it is counted
// in, within its rule. An empty string means the request has no key, and
// Options.OnMissingKey decides. Keys longer than 128 bytes are replaced by
// their SHA-256 (hex), so a client cannot send the store an oversized key.
type KeyFunc func(r *http.Request) string

// MissingKey decides a request whose KeyFunc returned "". The zero value
// is MissingDeny.
type MissingKey uint8

const (
	// MissingDeny answers 403 Forbidden (problem+json).
	MissingDeny MissingKey = iota
	// MissingAllow lets the request through uncounted.
	MissingAllow
	// MissingShared counts every keyless request of a rule in one shared
	// counter.
	MissingShared
	numMissing
)

var missingNames = [numMissing]string{"deny", "allow", "shared"}

// String returns "deny", "allow" or "shared".
func (m MissingKey) String() string {
	if m < numMissing {
		return missingNames[m]
	}
	return "MissingKey(" + strconv.Itoa(int(m)) + ")"
}

// ParseMissingKey reads "deny", "allow" or "shared"; any other word is an
// *limiter.InputError on the field "OnMissingKey".
func ParseMissingKey(s string) (MissingKey, error) {
	for i, n := range missingNames {
		if s == n {
			return MissingKey(i), nil
		}
	}
	return 0, optErr("OnMissingKey", "%q is not deny, allow or shared", s)
}

// Headers selects the rate-limit headers of an answer; combine them with
// |. The zero value means HeadersStandard.
type Headers uint8

const (
	// HeadersStandard: RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset (seconds until the quota is whole, rounded up).
	HeadersStandard Headers = 1 << iota
	// HeadersDraft: the structured fields of
	// draft-ietf-httpapi-ratelimit-headers-11,
	// RateLimit-Policy: "default";q=100;w=60 and
	// RateLimit: "default";r=42;t=17.
	HeadersDraft
	// HeadersLegacy: the de-facto X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset (Unix time in seconds, rounded up).
	HeadersLegacy
	headersAll = HeadersStandard | HeadersDraft | HeadersLegacy
)

// Rule gives the requests matching a pattern their own counter, or
// exempts them. It replaces the global limit for those requests; it does
// not add to it.
type Rule struct {
	// Pattern is a net/http ServeMux pattern, "POST /login",
	// "GET /items/{id}", "/admin/"; matched with ServeMux's precedence.
	// The counter is named after it. Required for Options.Routes; for
	// Limiter.Wrap, empty means the request's Pattern as set by the
	// ServeMux that routed it.
	Pattern string
	// Limit of the rule's counter; required unless Exempt.
	Limit limiter.Limit
	// Exempt requests are not counted and get no headers (health checks).
	Exempt bool
	// Key overrides Options.Key for this rule.
	Key KeyFunc
	// Name is the policy name in the draft headers, and the name of the
	// rule's limit (Limit.Name, a metrics label) unless that is set.
	// Default: Pattern.
	Name string
	// Shadow counts the rule's requests as usual but lets every one
	// through: a request over the limit is served, with the headers of
	// a spent quota (0 remaining) and no Retry-After, counted in
	// Limiter.ShadowStats and logged (at most a line every 10 s). What
	// the store records does not change. See limiter.Shadow.
	Shadow bool
}

// Route returns a rule giving pattern its own limit.
func Route(pattern string, limit limiter.Limit) Rule {
	return Rule{Pattern: pattern, Limit: limit}
}

// Exempt returns a rule exempting pattern from rate limiting.
func Exempt(pattern string) Rule { return Rule{Pattern: pattern, Exempt: true} }

// DefaultIPv6Prefix is the default Options.IPv6Prefix: one client usually
// holds a whole /64 and could rotate addresses inside it.
const DefaultIPv6Prefix = 64

// Options configure New. Limit is required; every other field has a
// default.
type Options struct {
	// Limit is the global limit: one counter per client shared by every
	// request no Route matches (unmatched paths included). Required.
	Limit limiter.Limit
	// Name is the global policy's name in the draft headers, and the
	// name of its limit (Limit.Name, a metrics label) unless that is set.
	// Default "default".
	Name string
	// Shadow puts every rule in shadow mode, the global one included (see
	// Rule.Shadow): to try the limits before enforcing them. Store
	// failures still follow OnStoreError.
	Shadow bool
	// Routes give patterns their own counters, or exempt them.
	Routes []Rule
	// Key returns a request's client key. Default: the client IP (see
	// IPv6Prefix, TrustedProxies).
	Key KeyFunc
	// IPv6Prefix is how many leading bits of an IPv6 client address form
	// its key ("2001:db8:1:2::/64"); 1 to 128. Default 64. IPv4 addresses,
	// and IPv4-mapped IPv6 ones, are keyed as the IPv4 address.
	IPv6Prefix int
	// TrustedProxies are the peers whose ProxyHeader is believed. The
	// client is the right-most address of the header that is not a
	// trusted proxy. Default none: the header is ignored, so a client
	// cannot choose its own key.
	TrustedProxies []netip.Prefix
	// ProxyHeader is the header the trusted proxies set:
	// "X-Forwarded-For" (default) or "Forwarded" (RFC 7239). Only one is
	// read, so a client cannot slip in the other.
	ProxyHeader string
	// OnMissingKey decides a request without a key. Default MissingDeny.
	OnMissingKey MissingKey
	// OnStoreError decides a request when the store fails:
	// fallback.Deny (default) answers 503, fallback.Allow lets it through
	// uncounted. For fallback.Local wrap the store with fallback.New.
	OnStoreError fallback.Policy
	// Headers selects the rate-limit headers. Default HeadersStandard.
	Headers Headers
	// KeyPrefix starts every store key ("http:POST /login:203.0.113.9").
	// Default "http".
	KeyPrefix string
	// Bounds are the store's bounds, checked when the rules are built
	// (a sliding-log limit above MaxLogUses). Zero fields: the defaults.
	Bounds limiter.Bounds
	// Logger receives the failure log and the missing-key warning.
	// Default slog.Default().
	Logger *slog.Logger
	// Clock reads the time for RateLimit-Reset. Default limiter.RealClock.
	Clock limiter.Clock
}

func optErr(field, format string, args ...any) error {
	return &limiter.InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func (o Options) withDefaults() (Options, error) {
	if o.Name == "" {
		o.Name = "default"
	}
	if o.IPv6Prefix == 0 {
		o.IPv6Prefix = DefaultIPv6Prefix
	}
	if o.IPv6Prefix < 1 || o.IPv6Prefix > 128 {
		return o, optErr("IPv6Prefix", "must be from 1 to 128, got %d", o.IPv6Prefix)
	}
	for i, p := range o.TrustedProxies {
		if !p.IsValid() {
			return o, optErr("TrustedProxies["+strconv.Itoa(i)+"]", "is not a valid prefix")
		}
		o.TrustedProxies[i] = p.Masked()
	}
	switch http.CanonicalHeaderKey(o.ProxyHeader) {
	case "":
		o.ProxyHeader = "X-Forwarded-For"
	case "X-Forwarded-For", "Forwarded":
		o.ProxyHeader = http.CanonicalHeaderKey(o.ProxyHeader)
	default:
		return o, optErr("ProxyHeader", "%q is not X-Forwarded-For or Forwarded", o.ProxyHeader)
	}
	if o.OnMissingKey >= numMissing {
		return o, optErr("OnMissingKey", "unknown value %d", o.OnMissingKey)
	}
	switch o.OnStoreError {
	case fallback.Deny, fallback.Allow:
	case fallback.Local:
		return o, optErr("OnStoreError", "local is a store policy: wrap the store with fallback.New(store, fallback.Config{Policy: fallback.Local})")
	default:
		return o, optErr("OnStoreError", "unknown policy %d (want deny or allow)", o.OnStoreError)
	}
	if o.Headers == 0 {
		o.Headers = HeadersStandard
	}
	if o.Headers&^headersAll != 0 {
		return o, optErr("Headers", "unknown header set %d", o.Headers)
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "http"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = limiter.RealClock
	}
	o.Bounds = o.Bounds.WithDefaults()
	return o, nil
}

// checkLimit validates a rule's limit against the contract and the bounds.
func checkLimit(field string, l limiter.Limit, b limiter.Bounds) error {
	if err := l.Validate(); err != nil {
		if ie, ok := err.(*limiter.InputError); ok {
			return optErr(field+"."+ie.Field, "%s", ie.Reason)
		}
		return optErr(field, "%v", err)
	}
	if (l.Algorithm == limiter.SlidingLog || l.Algorithm == limiter.Concurrency) && l.Uses > b.MaxLogUses {
		return optErr(field+".uses", "%d, more than the sliding-log bound of %d (use sliding-window or token-bucket)", l.Uses, b.MaxLogUses)
	}
	return nil
}

// checkName validates a draft-header policy name: printable ASCII, so it
// can be written as a structured-field string.
func checkName(field, s string) error {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return optErr(field, "%q has a byte that is not printable ASCII", s)
		}
	}
	return nil
}
