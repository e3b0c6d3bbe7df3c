package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// Interceptors limit the calls of a gRPC server. Safe for concurrent use.
type Interceptors struct {
	store    limiter.Store
	opts     Options
	global   *rule
	methods  map[string]*rule // exact full methods
	services map[string]*rule // "/pkg.Svc/" of "/pkg.Svc/*" rules
	flog     *fallback.FailureLog
	shadow   *limiter.ShadowStore // the store in shadow mode, for shadowed rules
	missing  sync.Once
}

type rule struct {
	store  limiter.Store // the interceptors', or its shadow
	exempt bool
	limit  limiter.Limit
	key    KeyFunc
	scope  string
}

// New validates opts and returns the interceptors. A bad option is an
// *limiter.InputError naming it.
func New(store limiter.Store, opts Options) (*Interceptors, error) {
	if store == nil {
		return nil, optErr("store", "must not be nil")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	in := &Interceptors{
		store:    store,
		opts:     opts,
		methods:  map[string]*rule{},
		services: map[string]*rule{},
		flog:     fallback.NewFailureLog(opts.Logger, opts.Clock),
		shadow:   limiter.Shadow(store, limiter.ShadowLogger(opts.Logger), limiter.ShadowClock(opts.Clock)),
	}
	in.global = in.newRule("*", Rule{Method: "default", Limit: opts.Limit, Shadow: opts.Shadow})
	for i, r := range opts.Methods {
		ru := in.newRule(r.Method, r)
		m, table := r.Method, in.methods
		if strings.HasSuffix(m, "/*") {
			m, table = strings.TrimSuffix(m, "*"), in.services
		}
		if _, dup := table[m]; dup {
			return nil, optErr("Methods["+strconv.Itoa(i)+"].Method", "%q is named twice", r.Method)
		}
		table[m] = ru
	}
	return in, nil
}

func (in *Interceptors) newRule(scope string, r Rule) *rule {
	key := r.Key
	if key == nil {
		key = in.opts.Key
	}
	lim := r.Limit
	if lim.Name == "" {
		lim.Name = r.Method // ASCII, and a method name is far below limiter.MaxNameBytes
		if len(lim.Name) > limiter.MaxNameBytes {
			lim.Name = lim.Name[:limiter.MaxNameBytes]
		}
	}
	st := in.store
	if r.Shadow || in.opts.Shadow {
		st = in.shadow
	}
	return &rule{store: st, exempt: r.Exempt, limit: lim, key: key, scope: in.opts.KeyPrefix + ":" + scope + ":"}
}

// ShadowStats counts the calls of shadowed rules (Options.Shadow,
// Rule.Shadow): those the store answered, and those it refused that were
// let through.
func (in *Interceptors) ShadowStats() limiter.ShadowStats { return in.shadow.Stats() }

func (in *Interceptors) ruleOf(fullMethod string) *rule {
	if r := in.methods[fullMethod]; r != nil {
		return r
	}
	if i := strings.LastIndexByte(fullMethod, '/'); i > 0 {
		if r := in.services[fullMethod[:i+1]]; r != nil {
			return r
		}
	}
	return in.global
}

// Unary returns the unary server interceptor.
func (in *Interceptors) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, release, err := in.check(ctx, info.FullMethod)
		if md != nil {
			_ = grpc.SetHeader(ctx, md)
		}
		if err != nil {
			return nil, err
		}
		if release != nil {
			defer in.giveBack(ctx, release) // concurrency.go
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor: a stream counts once,
// when it opens.
func (in *Interceptors) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, release, err := in.check(ss.Context(), info.FullMethod)
		if md != nil {
			_ = ss.SetHeader(md)
		}
		if err != nil {
			return err
		}
		if release != nil {
			defer in.giveBack(ss.Context(), release) // a stream holds its slot until it ends
		}
		return handler(srv, ss)
	}
}

// check counts a call; it returns the rate-limit metadata to send, the
// Release of a slot the call holds while it runs (a concurrency limit;
// nil otherwise) and, when the call must not go on, its status error.
func (in *Interceptors) check(ctx context.Context, fullMethod string) (metadata.MD, func(context.Context) error, error) {
	ru := in.ruleOf(fullMethod)
	if ru.exempt {
		return nil, nil, nil
	}
	if ru.limit.Algorithm == limiter.Concurrency {
		cctx := limiter.WithRelease(ctx)
		var release func(context.Context) error
		md, err := in.count(cctx, ru, fullMethod, &release)
		return md, release, err
	}
	md, err := in.count(ctx, ru, fullMethod, nil)
	return md, nil, err
}

// count counts a call under ru; with release set, it puts the verdict's
// Release there when the call was allowed.
func (in *Interceptors) count(ctx context.Context, ru *rule, fullMethod string, release *func(context.Context) error) (metadata.MD, error) {
	client := in.clientKey(ctx, ru, fullMethod)
	if client == "" {
		in.missing.Do(func() {
			in.opts.Logger.Warn("rate limit: call has no key", "on_missing_key", in.opts.OnMissingKey.String(), "method", fullMethod)
		})
		switch in.opts.OnMissingKey {
		case httplimit.MissingAllow:
			return nil, nil
		case httplimit.MissingShared:
			client = "\x00"
		default:
			return nil, status.Error(codes.PermissionDenied, "rate limit: call has no key")
		}
	}
	v, err := ru.store.ConsumeMany(ctx, []limiter.Entry{{Key: ru.scope + client, Limit: ru.limit}})
	if release != nil && err == nil && v.Allowed {
		*release = v.Release
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		id := in.flog.Failure(err)
		if in.opts.OnStoreError == fallback.Allow {
			return nil, nil
		}
		return nil, status.Error(codes.Unavailable, "rate limit store unavailable (correlation id "+id+")")
	}
	if v.Failure != nil && !fallback.IsLocal(v.Failure) {
		if v.Allowed {
			return nil, nil
		}
		var fe *fallback.FailureError
		id := ""
		if errors.As(v.Failure, &fe) {
			id = fe.ID
		}
		return nil, status.Error(codes.Unavailable, "rate limit store unavailable (correlation id "+id+")")
	}
	if v.Failure == nil {
		in.flog.Success()
	}
	remaining, reset := max(v.Remaining, 0), ceilSeconds(v.ResetAt.Sub(in.opts.Clock.Now()))
	if v.Shadowed {
		// Served, though the limit would have refused: a spent quota
		// until the refusal's wait is over, nothing to retry.
		remaining, reset = 0, max(ceilSeconds(v.RetryAfter), 1)
	}
	if !v.Allowed {
		retry := max(ceilSeconds(v.RetryAfter), 1)
		md := metadata.Pairs("ratelimit-limit", strconv.FormatInt(ru.limit.Uses, 10), "ratelimit-remaining", "0",
			"ratelimit-reset", strconv.FormatInt(retry, 10), "retry-after", strconv.FormatInt(retry, 10))
		st, derr := status.New(codes.ResourceExhausted, "rate limit exceeded").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(v.RetryAfter)})
		if derr != nil {
			return md, status.Error(codes.ResourceExhausted, "rate limit exceeded")
		}
		return md, st.Err()
	}
	return metadata.Pairs("ratelimit-limit", strconv.FormatInt(ru.limit.Uses, 10), "ratelimit-remaining", strconv.FormatInt(remaining, 10),
		"ratelimit-reset", strconv.FormatInt(reset, 10)), nil
}

func (in *Interceptors) clientKey(ctx context.Context, ru *rule, fullMethod string) string {
	var k string
	switch {
	case ru.key != nil:
		k = ru.key(ctx, fullMethod)
	case in.opts.MetadataKey != "":
		if v := metadata.ValueFromIncomingContext(ctx, in.opts.MetadataKey); len(v) > 0 {
			k = v[0]
		}
	default:
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return ""
		}
		if t, ok := p.Addr.(*net.TCPAddr); ok {
			return httplimit.AddrKey(t.AddrPort().Addr(), in.opts.IPv6Prefix)
		}
		if a, ok := httplimit.PeerAddr(p.Addr.String()); ok {
			return httplimit.AddrKey(a, in.opts.IPv6Prefix)
		}
		return ""
	}
	if len(k) > 128 {
		// A client must not hand the store an oversized key.
		sum := sha256.Sum256([]byte(k))
		k = "sha256:" + hex.EncodeToString(sum[:])
	}
	return k
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
