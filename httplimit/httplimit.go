package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
)

// Limiter holds validated options and the rules built from them. Its
// Middleware and Wrap handlers are safe for concurrent use.
type Limiter struct {
	store  limiter.Store
	opts   Options
	global *rule
	mux    *http.ServeMux // nil without routes
	// prefixes are the literal path starts of the route patterns: a
	// request whose path starts with none of them matches no route, and
	// skips the mux lookup (which allocates on a miss). nil: always look.
	prefixes []string
	flog     *fallback.FailureLog
	shadow   *limiter.ShadowStore // the store in shadow mode, for shadowed rules
	missing  sync.Once
}

// rule is a counter scope, ready to serve.
type rule struct {
	store   limiter.Store // the Limiter's, or its shadow
	exempt  bool
	limit   limiter.Limit
	key     KeyFunc // nil: the client IP
	scope   string  // store key prefix: "http:POST /login:"
	dynamic bool    // scope is completed with r.Pattern (Wrap without a pattern)
	slots   bool    // a concurrency limit: held while the handler runs (concurrency.go)
	policy  string  // draft-header policy, quoted: "\"default\""
	window  int64   // window in seconds, rounded up
}

// ServeHTTP makes a rule a marker handler in the route mux.
func (*rule) ServeHTTP(http.ResponseWriter, *http.Request) {}

// New validates opts and returns the middleware: one global counter per
// client, the Routes' own counters, and their exemptions. A bad option is
// an *limiter.InputError naming it.
func New(store limiter.Store, opts Options) (func(http.Handler) http.Handler, error) {
	l, err := NewLimiter(store, opts)
	if err != nil {
		return nil, err
	}
	return l.Middleware, nil
}

// NewLimiter is New returning the Limiter, for Wrap.
func NewLimiter(store limiter.Store, opts Options) (*Limiter, error) {
	if store == nil {
		return nil, optErr("store", "must not be nil")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkLimit("Limit", opts.Limit, opts.Bounds); err != nil {
		return nil, err
	}
	if err := checkName("Name", opts.Name); err != nil {
		return nil, err
	}
	l := &Limiter{store: store, opts: opts, flog: fallback.NewFailureLog(opts.Logger, opts.Clock),
		shadow: limiter.Shadow(store, limiter.ShadowLogger(opts.Logger), limiter.ShadowClock(opts.Clock))}
	l.global = l.newRule("*", Rule{Limit: opts.Limit, Key: opts.Key, Name: opts.Name, Shadow: opts.Shadow})
	if len(opts.Routes) > 0 {
		l.mux = http.NewServeMux()
	}
	seen := map[string]int{}
	for i, r := range opts.Routes {
		field := "Routes[" + strconv.Itoa(i) + "]"
		if r.Pattern == "" {
			return nil, optErr(field+".Pattern", "must not be empty")
		}
		if j, dup := seen[r.Pattern]; dup {
			return nil, optErr(field+".Pattern", "%q is also Routes[%d]", r.Pattern, j)
		}
		seen[r.Pattern] = i
		if err := l.checkRule(field, r); err != nil {
			return nil, err
		}
		if err := register(l.mux, r.Pattern, l.newRule(r.Pattern, r)); err != nil {
			return nil, optErr(field+".Pattern", "%v", err)
		}
	}
	l.prefixes = literalPrefixes(opts.Routes)
	return l, nil
}

func (l *Limiter) checkRule(field string, r Rule) error {
	if r.Exempt {
		return nil
	}
	if err := checkLimit(field+".Limit", r.Limit, l.opts.Bounds); err != nil {
		return err
	}
	return checkName(field+".Name", r.Name)
}

// register adds a pattern to the route mux, turning ServeMux's panic on
// a bad or conflicting pattern into an error.
func register(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

func (l *Limiter) newRule(scope string, r Rule) *rule {
	key := r.Key
	if key == nil {
		key = l.opts.Key
	}
	name := r.Name
	if name == "" {
		name = r.Pattern
	}
	if name == "" {
		name = "default"
	}
	lim := r.Limit
	if lim.Name == "" {
		lim.Name = limitName(name)
	}
	st := l.store
	if r.Shadow || l.opts.Shadow {
		st = l.shadow
	}
	return &rule{
		store:  st,
		exempt: r.Exempt,
		limit:  lim,
		key:    key,
		scope:  l.opts.KeyPrefix + ":" + scope + ":",
		policy: quotePolicy(name),
		window: windowSeconds(r.Limit.Window),
		slots:  lim.Algorithm == limiter.Concurrency,
	}
}

// Middleware counts each request in the counter of its rule: the Route
// whose pattern matches it (ServeMux precedence), or the global one.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ru := l.global
		if l.mux != nil && l.mayMatch(r.URL.Path) {
			if h, _ := l.mux.Handler(r); h != nil {
				if m, ok := h.(*rule); ok {
					ru = m
				}
			}
		}
		switch {
		case ru.exempt:
			next.ServeHTTP(w, r)
		case ru.slots:
			l.serveHeld(w, r, ru, next)
		case l.check(w, r, ru, nil):
			next.ServeHTTP(w, r)
		}
	})
}

// literalPrefixes returns the path part of each pattern up to its first
// wildcard, or nil when a pattern names a host (then every request is
// looked up).
func literalPrefixes(rules []Rule) []string {
	var ps []string
	for _, r := range rules {
		p := r.Pattern
		if i := strings.IndexAny(p, " \t"); i >= 0 {
			p = strings.TrimLeft(p[i:], " \t") // drop the method
		}
		if !strings.HasPrefix(p, "/") {
			return nil
		}
		if i := strings.IndexByte(p, '{'); i >= 0 {
			p = p[:i]
		}
		ps = append(ps, p)
	}
	return ps
}

// mayMatch reports whether path could match a route: a superset test, as
// patterns match the unescaped segments that Path holds.
func (l *Limiter) mayMatch(path string) bool {
	if l.prefixes == nil {
		return true
	}
	for _, p := range l.prefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// Wrap puts one handler behind its own counter: a layer of its own, so a
// request that also passes the Middleware counts once in each. The counter
// is named after rule.Pattern, or, when that is empty, after the pattern
// the ServeMux matched (Request.Pattern). rule.Exempt is not allowed here.
func (l *Limiter) Wrap(r Rule, h http.Handler) (http.Handler, error) {
	if h == nil {
		return nil, optErr("handler", "must not be nil")
	}
	if r.Exempt {
		return nil, optErr("Rule.Exempt", "a wrapped handler is limited by definition; leave it unwrapped instead")
	}
	if err := l.checkRule("Rule", r); err != nil {
		return nil, err
	}
	ru := l.newRule("handler:"+r.Pattern, r)
	ru.dynamic = r.Pattern == ""
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if ru.slots {
			l.serveHeld(w, req, ru, h)
		} else if l.check(w, req, ru, nil) {
			h.ServeHTTP(w, req)
		}
	}), nil
}

// entryPool recycles the one-entry batch of a request: stores do not keep
// the slice.
var entryPool = sync.Pool{New: func() any { return new([1]limiter.Entry) }}

// check counts r in ru's counter, writes the headers, and reports whether
// the request may go on; when not, it has answered. With release set, the
// call asks for the verdict's Release and puts it there (nil when there
// is none: refused, or let through uncounted).
func (l *Limiter) check(w http.ResponseWriter, r *http.Request, ru *rule, release *func(context.Context) error) bool {
	var buf [192]byte
	b := append(buf[:0], ru.scope...)
	if ru.dynamic {
		b = append(b[:len(b)-1], r.Pattern...)
		b = append(b, ':')
	}
	n := len(b)
	if ru.key == nil {
		if a, ok := ClientAddr(r, l.opts.TrustedProxies, l.opts.ProxyHeader); ok {
			b = AppendAddrKey(b, a, l.opts.IPv6Prefix)
		}
	} else {
		b = appendClient(b, ru.key(r))
	}
	if len(b) == n {
		l.missingKey(r)
		switch l.opts.OnMissingKey {
		case MissingAllow:
			return true
		case MissingShared:
			b = append(b, 0)
		default:
			writeProblem(w, r, http.StatusForbidden, "Request has no rate limit key")
			return false
		}
	}
	e := entryPool.Get().(*[1]limiter.Entry)
	e[0] = limiter.Entry{Key: string(b), Limit: ru.limit}
	ctx := r.Context()
	if release != nil {
		ctx = limiter.WithRelease(ctx)
	}
	v, err := ru.store.ConsumeMany(ctx, e[:])
	if release != nil && v.Allowed {
		*release = v.Release
	}
	e[0] = limiter.Entry{}
	entryPool.Put(e)
	if err != nil {
		if r.Context().Err() != nil && errors.Is(err, r.Context().Err()) {
			return false // the client went away: not the store's fault
		}
		id := l.flog.Failure(err)
		return l.storeFailed(w, r, id)
	}
	if v.Failure != nil && !fallback.IsLocal(v.Failure) {
		if v.Allowed {
			return true // let through uncounted: no headers to give
		}
		var fe *fallback.FailureError
		id := ""
		if errors.As(v.Failure, &fe) {
			id = fe.ID
		}
		writeProblemID(w, r, http.StatusServiceUnavailable, "Rate limit store unavailable", id)
		return false
	}
	if v.Failure == nil {
		l.flog.Success()
	}
	l.writeHeaders(w.Header(), ru, &v)
	if !v.Allowed {
		writeProblem(w, r, http.StatusTooManyRequests, "Rate limit exceeded")
		return false
	}
	return true
}

// ShadowStats counts the requests of shadowed rules (Options.Shadow,
// Rule.Shadow): those the store answered, and those it refused that were
// let through.
func (l *Limiter) ShadowStats() limiter.ShadowStats { return l.shadow.Stats() }

// limitName is a rule's name as its limit's Name: cut to
// limiter.MaxNameBytes on a character boundary (a long pattern is still a
// fine label).
func limitName(name string) string {
	if len(name) <= limiter.MaxNameBytes {
		return name
	}
	n := limiter.MaxNameBytes
	for n > 0 && !utf8.RuneStart(name[n]) {
		n--
	}
	return name[:n]
}

func (l *Limiter) storeFailed(w http.ResponseWriter, r *http.Request, id string) bool {
	if l.opts.OnStoreError == fallback.Allow {
		return true
	}
	writeProblemID(w, r, http.StatusServiceUnavailable, "Rate limit store unavailable", id)
	return false
}

func (l *Limiter) missingKey(r *http.Request) {
	l.missing.Do(func() {
		l.opts.Logger.Warn("rate limit: request has no key", "on_missing_key", l.opts.OnMissingKey.String(), "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
	})
}
