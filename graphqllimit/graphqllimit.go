package graphqllimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// Limiter is a gqlgen handler extension that limits fields. Add it with
// (*handler.Server).Use. Safe for concurrent use.
type Limiter struct {
	store   limiter.Store
	opts    Options
	schema  *ast.Schema
	fields  map[string]*fieldRule // "Type.field"
	flog    *fallback.FailureLog
	missing sync.Once
}

var (
	_ graphql.HandlerExtension     = (*Limiter)(nil)
	_ graphql.OperationInterceptor = (*Limiter)(nil)
	_ graphql.FieldInterceptor     = (*Limiter)(nil)
)

// fieldRule is one limited field.
type fieldRule struct {
	name  string // "Type.field"
	limit limiter.Limit
	cost  int64
	key   KeyFunc
	scope string // the store key's prefix: "graphql:Type.field:"
}

// New reads the limits of schema (its @rateLimit directives, see
// DirectiveSDL) and opts.Fields, and returns the extension for the
// gqlgen server of that schema. A bad option or directive is an
// *limiter.InputError naming it ("Fields[1].Field",
// "schema Query.search @rateLimit(limit)").
func New(store limiter.Store, schema graphql.ExecutableSchema, opts Options) (*Limiter, error) {
	if store == nil {
		return nil, optErr("store", "must not be nil")
	}
	if schema == nil || schema.Schema() == nil {
		return nil, optErr("schema", "must not be nil")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Limiter{store: store, opts: opts, schema: schema.Schema(), fields: map[string]*fieldRule{},
		flog: fallback.NewFailureLog(opts.Logger, opts.Clock)}
	if err := l.readDirectives(); err != nil {
		return nil, err
	}
	for i, r := range opts.Fields {
		field := "Fields[" + strconv.Itoa(i) + "]"
		typ, name, _ := strings.Cut(r.Field, ".")
		def := l.schema.Types[typ]
		if def == nil || (def.Kind != ast.Object && def.Kind != ast.Interface) || def.Fields.ForName(name) == nil {
			return nil, optErr(field+".Field", "%q is not a field of an object or interface type of the schema (want Type.field)", r.Field)
		}
		if err := checkLimit(field+".Limit", r.Limit, opts.Bounds); err != nil {
			return nil, err
		}
		if r.Cost < 0 || r.Cost > r.Limit.Uses {
			return nil, optErr(field+".Cost", "must be from 0 (meaning 1) to the limit's %d uses, got %d", r.Limit.Uses, r.Cost)
		}
		l.fields[r.Field] = l.newRule(r.Field, r.Limit, max(r.Cost, 1), r.Key)
	}
	return l, nil
}

func (l *Limiter) newRule(name string, limit limiter.Limit, cost int64, key KeyFunc) *fieldRule {
	if key == nil {
		key = l.opts.Key
	}
	return &fieldRule{name: name, limit: limit, cost: cost, key: key, scope: l.opts.KeyPrefix + ":" + name + ":"}
}

// readDirectives reads the limits the schema declares on the fields of its
// object and interface types.
func (l *Limiter) readDirectives() error {
	for _, def := range l.schema.Types {
		if def.Kind != ast.Object && def.Kind != ast.Interface {
			continue
		}
		for _, f := range def.Fields {
			d := f.Directives.ForName(l.opts.Directive)
			if d == nil {
				continue
			}
			name := def.Name + "." + f.Name
			where := "schema " + name + " @" + l.opts.Directive
			args := d.ArgumentMap(nil) // the directive's defaults included
			raw, _ := args["limit"].(string)
			limit, err := limiter.ParseLimit(raw)
			if err != nil {
				return optErr(where+"(limit)", "%q: %v", raw, err)
			}
			if err := checkLimit(where+"(limit)", limit, l.opts.Bounds); err != nil {
				return err
			}
			cost := int64(1)
			if c, ok := args["cost"]; ok && c != nil {
				n, ok := c.(int64)
				if !ok || n < 1 || n > limit.Uses {
					return optErr(where+"(cost)", "must be from 1 to the limit's %d uses, got %v", limit.Uses, c)
				}
				cost = n
			}
			l.fields[name] = l.newRule(name, limit, cost, nil)
		}
	}
	return nil
}

// ExtensionName names the extension in gqlgen's stats and logs.
func (l *Limiter) ExtensionName() string { return "RateLimit" }

// Validate refuses a server of another schema than the one New read
// (gqlgen panics on the error: use the Limiter with its own schema).
func (l *Limiter) Validate(schema graphql.ExecutableSchema) error {
	if schema.Schema() != l.schema {
		return errors.New("graphqllimit: the Limiter was made for another schema; pass this server's schema to New")
	}
	return nil
}

type decisionKey struct{}

// decision is what one request's store call decided: the fields refused,
// each with its error.
type decision struct {
	refused map[*ast.Field]*gqlerror.Error
}

// InterceptOperation counts every limited field the operation selects in
// one store call, before any resolver runs.
func (l *Limiter) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	op := graphql.GetOperationContext(ctx)
	if op == nil || op.Operation == nil {
		return next(ctx)
	}
	uses := l.collect(op.Operation, op.Variables)
	if len(uses) == 0 {
		return next(ctx)
	}
	if d := l.decide(ctx, uses); len(d.refused) > 0 {
		ctx = context.WithValue(ctx, decisionKey{}, d)
	}
	return next(ctx)
}

// InterceptField answers a refused field with its error; its resolver
// does not run.
func (l *Limiter) InterceptField(ctx context.Context, next graphql.Resolver) (any, error) {
	d, _ := ctx.Value(decisionKey{}).(*decision)
	if d == nil {
		return next(ctx)
	}
	fc := graphql.GetFieldContext(ctx)
	if fc == nil {
		return next(ctx)
	}
	tmpl, refused := d.refused[fc.Field.Field]
	if !refused {
		return next(ctx)
	}
	e := *tmpl // each resolution gets its own error, with its own path
	e.Path = fc.Path()
	return nil, &e
}

// decide counts the uses in one ConsumeMany and says which fields are
// refused.
func (l *Limiter) decide(ctx context.Context, uses []*use) *decision {
	d := &decision{refused: map[*ast.Field]*gqlerror.Error{}}
	entries := make([]limiter.Entry, 0, len(uses))
	counted := make([]*use, 0, len(uses))
	for _, u := range uses {
		client := l.clientKey(ctx, u.rule)
		if client == "" {
			l.missing.Do(func() {
				l.opts.Logger.Warn("graphqllimit: request has no rate limit key (wrap the handler with Limiter.HTTP, or set Options.Key)",
					"on_missing_key", l.opts.OnMissingKey.String(), "field", u.rule.name)
			})
			switch l.opts.OnMissingKey {
			case httplimit.MissingAllow:
				continue
			case httplimit.MissingShared:
				client = "\x00"
			default:
				d.refuse(u, &gqlerror.Error{Message: "rate limit: request has no key for " + u.rule.name,
					Extensions: map[string]any{"code": CodeNoKey}})
				continue
			}
		}
		cost := u.count * u.rule.cost
		if cost > u.rule.limit.Uses {
			// No window holds it: the store would call the batch invalid.
			d.refuse(u, &gqlerror.Error{
				Message:    fmt.Sprintf("rate limit: %s selected %d times in one request, more than its limit of %d", u.rule.name, cost, u.rule.limit.Uses),
				Extensions: map[string]any{"code": CodeRateLimited}})
			continue
		}
		entries = append(entries, limiter.Entry{Key: u.rule.scope + client, Limit: u.rule.limit, Cost: cost})
		counted = append(counted, u)
	}
	if len(entries) == 0 {
		return d
	}
	if len(entries) > l.opts.Bounds.MaxEntries {
		for _, u := range counted {
			d.refuse(u, &gqlerror.Error{
				Message:    fmt.Sprintf("rate limit: the request selects %d rate-limited fields, more than one check holds (%d)", len(entries), l.opts.Bounds.MaxEntries),
				Extensions: map[string]any{"code": CodeRateLimited}})
		}
		return d
	}
	v, err := l.store.ConsumeMany(ctx, entries)
	switch {
	case err != nil:
		id := l.flog.Failure(err)
		if l.opts.OnStoreError == fallback.Allow {
			return d
		}
		l.refuseAll(d, counted, unavailable(id))
	case v.Failure != nil && !fallback.IsLocal(v.Failure):
		// A fallback.Store's policy decided: a refusal is an outage, not
		// a count.
		if !v.Allowed {
			var fe *fallback.FailureError
			id := ""
			if errors.As(v.Failure, &fe) {
				id = fe.ID
			}
			l.refuseAll(d, counted, unavailable(id))
		}
	default:
		if v.Failure == nil {
			l.flog.Success()
		}
		if !v.Allowed {
			if l.opts.SplitRefused && len(entries) > 1 {
				l.split(ctx, d, entries, counted)
			} else {
				l.refuseAll(d, counted, rateLimited(v))
			}
		}
	}
	return d
}

// split counts each entry of a refused batch on its own and refuses the
// fields whose own entry is refused (or whose store call failed, under
// OnStoreError deny).
func (l *Limiter) split(ctx context.Context, d *decision, entries []limiter.Entry, counted []*use) {
	for i, e := range entries {
		v, err := l.store.ConsumeMany(ctx, []limiter.Entry{e})
		switch {
		case err != nil:
			id := l.flog.Failure(err)
			if l.opts.OnStoreError != fallback.Allow {
				d.refuse(counted[i], unavailable(id)(counted[i].rule.name))
			}
		case v.Failure != nil && !fallback.IsLocal(v.Failure):
			if !v.Allowed {
				var fe *fallback.FailureError
				id := ""
				if errors.As(v.Failure, &fe) {
					id = fe.ID
				}
				d.refuse(counted[i], unavailable(id)(counted[i].rule.name))
			}
		case !v.Allowed:
			d.refuse(counted[i], rateLimited(v)(counted[i].rule.name))
		}
	}
}

// refuseAll refuses every counted use: a refused batch records nothing,
// so none of its fields may run.
func (l *Limiter) refuseAll(d *decision, counted []*use, e func(name string) *gqlerror.Error) {
	for _, u := range counted {
		d.refuse(u, e(u.rule.name))
	}
}

func (d *decision) refuse(u *use, e *gqlerror.Error) {
	for _, f := range u.fields {
		d.refused[f] = e
	}
}

func rateLimited(v limiter.Verdict) func(string) *gqlerror.Error {
	secs := max(ceilSeconds(v.RetryAfter), 1)
	return func(name string) *gqlerror.Error {
		return &gqlerror.Error{
			Message: fmt.Sprintf("rate limit exceeded: %s, retry in %d s", name, secs),
			Extensions: map[string]any{
				"code":         CodeRateLimited,
				"retryAfter":   secs,
				"retryAfterMs": v.RetryAfter.Milliseconds() + boolInt(v.RetryAfter%time.Millisecond != 0),
				"retryAt":      v.RetryAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
			},
		}
	}
}

func unavailable(id string) func(string) *gqlerror.Error {
	return func(name string) *gqlerror.Error {
		return &gqlerror.Error{
			Message:    "rate limit store unavailable (correlation id " + id + "): " + name,
			Extensions: map[string]any{"code": CodeUnavailable, "correlationId": id},
		}
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

type clientKey struct{}

// WithClient returns ctx carrying the client key the default Options.Key
// reads: for transports Limiter.HTTP does not wrap, or a key an
// authentication layer found (a user id).
func WithClient(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, clientKey{}, key)
}

// ClientFrom returns the client key of ctx (WithClient, Limiter.HTTP), or
// "".
func ClientFrom(ctx context.Context) string {
	k, _ := ctx.Value(clientKey{}).(string)
	return k
}

// HTTP wraps the gqlgen handler so that the default key, the client IP,
// is known to the Limiter: gqlgen does not pass the request on. A key
// already in the context (WithClient, by a layer before) is kept.
func (l *Limiter) HTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ClientFrom(r.Context()) == "" {
			if a, ok := httplimit.ClientAddr(r, l.opts.TrustedProxies, l.opts.ProxyHeader); ok {
				r = r.WithContext(WithClient(r.Context(), httplimit.AddrKey(a, l.opts.IPv6Prefix)))
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (l *Limiter) clientKey(ctx context.Context, r *fieldRule) string {
	var k string
	if r.key != nil {
		k = r.key(ctx)
	} else {
		k = ClientFrom(ctx)
	}
	if len(k) > 128 {
		// A client must not hand the store an oversized key.
		sum := sha256.Sum256([]byte(k))
		k = "sha256:" + hex.EncodeToString(sum[:])
	}
	return k
}
