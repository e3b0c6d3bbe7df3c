package grpclimit

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// KeyFunc returns the client key of a call; "" means the call has no key
// and Options.OnMissingKey decides. fullMethod is "/package.Service/Method".
type KeyFunc func(ctx context.Context, fullMethod string) string

// Rule gives the calls of a method, or of every method of a service, their
// own counter, or exempts them. It replaces the global limit for them.
type Rule struct {
	// Method is a full method name, "/grpc.health.v1.Health/Check", or a
	// whole service, "/grpc.health.v1.Health/*". An exact method wins
	// over its service. The counter is named after it.
	Method string
	// Limit of the rule's counter; required unless Exempt.
	Limit limiter.Limit
	// Exempt calls are not counted.
	Exempt bool
	// Key overrides Options.Key for this rule.
	Key KeyFunc
	// Shadow counts the rule's calls as usual but lets every one through:
	// a call over the limit goes on, with ratelimit-remaining 0 and no
	// retry-after, counted in Interceptors.ShadowStats and logged (at
	// most a line every 10 s). What the store records does not change.
	// See limiter.Shadow.
	Shadow bool
}

// Method returns a rule giving a method (or a service, "/pkg.Svc/*") its
// own limit.
func Method(name string, limit limiter.Limit) Rule { return Rule{Method: name, Limit: limit} }

// Exempt returns a rule exempting a method or service (health checks).
func Exempt(name string) Rule { return Rule{Method: name, Exempt: true} }

// Options configure New: the same choices as httplimit.Options, for gRPC.
// Limit is required; every other field has a default.
type Options struct {
	// Limit is the global limit: one counter per client shared by every
	// method no rule names. Required.
	Limit limiter.Limit
	// Methods give methods or services their own counters, or exempt them.
	// Each rule's limit is named after its Method (Limit.Name, a metrics
	// label), the global one "default", unless the limit has a Name.
	Methods []Rule
	// Shadow puts every rule in shadow mode, the global one included (see
	// Rule.Shadow). Store failures still follow OnStoreError.
	Shadow bool
	// Key returns a call's client key. Default: MetadataKey when set, else
	// the peer's IP address (IPv6 masked to IPv6Prefix bits).
	Key KeyFunc
	// MetadataKey names an incoming metadata entry holding the client key
	// ("x-api-key"). Not allowed together with Key.
	MetadataKey string
	// IPv6Prefix is how many leading bits of an IPv6 peer address form
	// its key; 1 to 128. Default 64. IPv4-mapped addresses are keyed as
	// IPv4.
	IPv6Prefix int
	// OnMissingKey decides a call without a key: httplimit.MissingDeny
	// (default; codes.PermissionDenied), MissingAllow or MissingShared.
	OnMissingKey httplimit.MissingKey
	// OnStoreError decides a call when the store fails: fallback.Deny
	// (default; codes.Unavailable) or fallback.Allow (uncounted). For
	// fallback.Local wrap the store with fallback.New.
	OnStoreError fallback.Policy
	// KeyPrefix starts every store key
	// ("grpc:/grpc.health.v1.Health/Check:203.0.113.9"). Default "grpc".
	KeyPrefix string
	// Bounds are the store's bounds, checked when the rules are built.
	// Zero fields: the defaults.
	Bounds limiter.Bounds
	// Logger receives the failure log and the missing-key warning.
	// Default slog.Default().
	Logger *slog.Logger
	// Clock reads the time for the ratelimit-reset header. Default
	// limiter.RealClock.
	Clock limiter.Clock
}

func optErr(field, format string, args ...any) error {
	return &limiter.InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func (o Options) withDefaults() (Options, error) {
	if o.IPv6Prefix == 0 {
		o.IPv6Prefix = httplimit.DefaultIPv6Prefix
	}
	if o.IPv6Prefix < 1 || o.IPv6Prefix > 128 {
		return o, optErr("IPv6Prefix", "must be from 1 to 128, got %d", o.IPv6Prefix)
	}
	if o.Key != nil && o.MetadataKey != "" {
		return o, optErr("MetadataKey", "set Key or MetadataKey, not both")
	}
	o.MetadataKey = strings.ToLower(o.MetadataKey)
	if _, err := httplimit.ParseMissingKey(o.OnMissingKey.String()); err != nil {
		return o, optErr("OnMissingKey", "unknown value %d", o.OnMissingKey)
	}
	switch o.OnStoreError {
	case fallback.Deny, fallback.Allow:
	case fallback.Local:
		return o, optErr("OnStoreError", "local is a store policy: wrap the store with fallback.New(store, fallback.Config{Policy: fallback.Local})")
	default:
		return o, optErr("OnStoreError", "unknown policy %d (want deny or allow)", o.OnStoreError)
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "grpc"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = limiter.RealClock
	}
	o.Bounds = o.Bounds.WithDefaults()
	if err := checkLimit("Limit", o.Limit, o.Bounds); err != nil {
		return o, err
	}
	for i, r := range o.Methods {
		field := "Methods[" + strconv.Itoa(i) + "]"
		svc, m, ok := strings.Cut(strings.TrimPrefix(r.Method, "/"), "/")
		if !strings.HasPrefix(r.Method, "/") || !ok || svc == "" || m == "" || strings.Contains(m, "/") || (strings.Contains(m, "*") && m != "*") {
			return o, optErr(field+".Method", "%q is not /package.Service/Method or /package.Service/*", r.Method)
		}
		if !r.Exempt {
			if err := checkLimit(field+".Limit", r.Limit, o.Bounds); err != nil {
				return o, err
			}
		}
	}
	return o, nil
}

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
