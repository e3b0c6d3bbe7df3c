package graphqllimit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// DirectiveSDL declares the schema directive the Limiter reads. Put it in
// the schema, and tell gqlgen to generate no run-time code for it (the
// Limiter reads it from the schema, so no DirectiveRoot function is
// needed), in gqlgen.yml:
//
//	directives:
//	  rateLimit:
//	    skip_runtime: true
//
// limit is a limiter.ParseLimit string ("5/1m", "token-bucket:100/1s");
// cost is the uses one selection of the field takes (default 1).
const DirectiveSDL = `directive @rateLimit(limit: String!, cost: Int = 1) on FIELD_DEFINITION`

// DefaultDirective is the directive's default name, Options.Directive.
const DefaultDirective = "rateLimit"

// The extensions.code of the errors a refused field gets.
const (
	// CodeRateLimited: the field is over its limit. The error's
	// extensions also carry retryAfter (whole seconds, rounded up, at
	// least 1), retryAfterMs and retryAt (RFC 3339, UTC, milliseconds):
	// when the request would pass.
	CodeRateLimited = "RATE_LIMITED"
	// CodeUnavailable: the store failed and Options.OnStoreError is
	// fallback.Deny. extensions.correlationId names the failure as
	// logged.
	CodeUnavailable = "RATE_LIMIT_UNAVAILABLE"
	// CodeNoKey: Options.Key found no client key and Options.OnMissingKey
	// is httplimit.MissingDeny.
	CodeNoKey = "RATE_LIMIT_NO_KEY"
)

// KeyFunc returns the client key of a request: the counter it is counted
// in, within a field's limit. "" means the request has no key, and
// Options.OnMissingKey decides. Keys longer than 128 bytes are replaced by
// their SHA-256.
type KeyFunc func(ctx context.Context) string

// Rule gives a field a limit in the options (the schema directive is the
// other way). A rule replaces the directive of the same field.
type Rule struct {
	// Field is "Type.field": "Query.search", "Mutation.login",
	// "Item.price". For a field of an interface, name the interface's
	// field (what the query selects). Required.
	Field string
	// Limit of the field's counter. Required.
	Limit limiter.Limit
	// Cost is the uses one selection of the field takes. Default 1.
	Cost int64
	// Key overrides Options.Key for this field.
	Key KeyFunc
}

// Field returns a rule giving field ("Type.field") its own limit.
func Field(field string, limit limiter.Limit) Rule { return Rule{Field: field, Limit: limit} }

// Options configure New. Every field has a default.
type Options struct {
	// Fields give fields limits, or change the limit the schema
	// directive gives them.
	Fields []Rule
	// Directive is the name of the schema directive read for limits,
	// without the @. Default "rateLimit" (DirectiveSDL).
	Directive string
	// Key returns a request's client key. Default: the client IP that
	// Limiter.HTTP put in the context (IPv6 masked to IPv6Prefix bits,
	// the forwarding header read only from TrustedProxies), or
	// WithClient's key.
	Key KeyFunc
	// IPv6Prefix, TrustedProxies and ProxyHeader decide the client IP
	// Limiter.HTTP finds, as in httplimit.Options: defaults 64 bits, none
	// (the forwarding header is ignored), "X-Forwarded-For".
	IPv6Prefix     int
	TrustedProxies []netip.Prefix
	ProxyHeader    string
	// OnMissingKey decides a request without a key: httplimit.MissingDeny
	// (default: its limited fields fail with CodeNoKey),
	// httplimit.MissingAllow (they run uncounted) or
	// httplimit.MissingShared (every keyless request shares one counter).
	OnMissingKey httplimit.MissingKey
	// OnStoreError decides the limited fields of a request when the
	// store fails: fallback.Deny (default: they fail with
	// CodeUnavailable) or fallback.Allow (they run uncounted). For
	// fallback.Local wrap the store with fallback.New.
	OnStoreError fallback.Policy
	// SplitRefused, when a request's batch is refused, counts each of its
	// limited fields on its own (one more store call per field, in the
	// order the request selects them), so only the fields over their
	// limits are refused and the others run, counted. Default false: one
	// store call per request, all or nothing.
	SplitRefused bool
	// KeyPrefix starts every store key ("graphql:Query.search:203.0.113.9").
	// Default "graphql".
	KeyPrefix string
	// Bounds are the store's bounds, checked when the limits are read.
	// Zero fields: the defaults.
	Bounds limiter.Bounds
	// Logger receives the failure log and the missing-key warning.
	// Default slog.Default().
	Logger *slog.Logger
	// Clock reads the time for the failure log's throttle (waits come
	// from the store's verdicts). Default limiter.RealClock.
	Clock limiter.Clock
}

func optErr(field, format string, args ...any) error {
	return &limiter.InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func (o Options) withDefaults() (Options, error) {
	if o.Directive == "" {
		o.Directive = DefaultDirective
	}
	if o.IPv6Prefix == 0 {
		o.IPv6Prefix = httplimit.DefaultIPv6Prefix
	}
	if o.IPv6Prefix < 1 || o.IPv6Prefix > 128 {
		return o, optErr("IPv6Prefix", "must be from 1 to 128, got %d", o.IPv6Prefix)
	}
	trusted := make([]netip.Prefix, len(o.TrustedProxies))
	for i, p := range o.TrustedProxies {
		if !p.IsValid() {
			return o, optErr("TrustedProxies["+strconv.Itoa(i)+"]", "is not a valid prefix")
		}
		trusted[i] = p.Masked()
	}
	o.TrustedProxies = trusted // never write into the caller's slice
	switch http.CanonicalHeaderKey(o.ProxyHeader) {
	case "":
		o.ProxyHeader = "X-Forwarded-For"
	case "X-Forwarded-For", "Forwarded":
		o.ProxyHeader = http.CanonicalHeaderKey(o.ProxyHeader)
	default:
		return o, optErr("ProxyHeader", "%q is not X-Forwarded-For or Forwarded", o.ProxyHeader)
	}
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
		o.KeyPrefix = "graphql"
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

// checkLimit validates a field's limit against the contract and the
// bounds, naming field.
func checkLimit(field string, l limiter.Limit, b limiter.Bounds) error {
	if err := l.Validate(); err != nil {
		if ie, ok := err.(*limiter.InputError); ok {
			return optErr(field+"."+ie.Field, "%s", ie.Reason)
		}
		return optErr(field, "%v", err)
	}
	if l.Algorithm == limiter.Concurrency {
		// An operation's fields are counted up front, in one batch, and
		// nothing marks the end of each field's work to free a slot at.
		return optErr(field+".algorithm", "concurrency limits are not supported by graphqllimit (its counts are taken when the operation starts); put httplimit.Concurrency on the GraphQL route instead")
	}
	if l.Algorithm == limiter.SlidingLog && l.Uses > b.MaxLogUses {
		return optErr(field+".uses", "%d, more than the sliding-log bound of %d (use sliding-window or token-bucket)", l.Uses, b.MaxLogUses)
	}
	return nil
}
