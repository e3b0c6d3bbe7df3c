package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc"
)

// Service is envoy.service.ratelimit.v3.RateLimitService over a
// limiter.Store. Safe for concurrent use; Reload swaps its rules while it
// serves.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	store limiter.Store
	cfg   atomic.Pointer[compiled]
	stats *stats
	mu    sync.Mutex // serialises Reload and reloadDomains
	conf  Config     // the Config cfg was compiled from
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// New validates cfg and returns a service counting in store (a ringlimit
// node, so the whole fleet shares the counts, or any other Store). Errors
// are *ConfigError.
func New(store limiter.Store, cfg Config) (*Service, error) {
	if store == nil {
		return nil, &ConfigError{Path: "store", Reason: "must not be nil"}
	}
	c, err := compile(cfg)
	if err != nil {
		return nil, err
	}
	s := &Service{store: store, stats: newStats(), conf: cfg}
	s.cfg.Store(c)
	s.stats.loadOK.Add(1)
	return s, nil
}

// Reload replaces the configuration; calls under way finish with the old
// one. A bad cfg leaves the service unchanged.
func (s *Service) Reload(cfg Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := compile(cfg)
	if err != nil {
		s.stats.loadErr.Add(1)
		return err
	}
	s.cfg.Store(c)
	s.conf = cfg
	s.stats.loadOK.Add(1)
	return nil
}

// reloadDomains replaces the rules only, keeping the other settings.
func (s *Service) reloadDomains(domains []Domain) error {
	s.mu.Lock()
	cfg := s.conf
	s.mu.Unlock()
	cfg.Domains = domains
	return s.Reload(cfg)
}

// Domains lists the configured domains, sorted.
func (s *Service) Domains() []string {
	c := s.cfg.Load()
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// Register registers the service on a gRPC server.
func (s *Service) Register(srv grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(srv, s)
}

// check is one request descriptor on its way to the store.
type check struct {
	rule   *rule
	entry  limiter.Entry
	peek   bool
	metric string // the metrics' key; "" for no metrics
	fold   string // where metric is folded past Config.MaxMetricKeys; "" when metric is the rule's own key
	status *rlsv3.RateLimitResponse_DescriptorStatus
	// shadowed: the store refused and its shadow mode let the descriptor
	// through (a node's --shadow, limiter.Shadow): the descriptor is over
	// its limit, and the request is answered as envoy's global shadow
	// mode answers it.
	shadowed bool
}

// maxParallel bounds the store calls one request makes at once: its
// descriptors are counted apart, by this many goroutines at most (the
// caller's among them), never one goroutine each.
const maxParallel = 8

// ShouldRateLimit decides a request. Each descriptor finds its rule (see
// the package documentation) and is counted on its own, as in envoy's
// reference service: a request over the limit in one descriptor still
// counts in the others. The overall code is OVER_LIMIT when any
// descriptor not in quota_mode is, or when every quota_mode descriptor
// is. A store error fails the whole call (Envoy's failure_mode_deny then
// decides); bad requests get InvalidArgument, more descriptors than
// Config.MaxDescriptors ResourceExhausted.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	c := s.cfg.Load()
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rls: domain: must not be empty")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rls: descriptors: must not be empty")
	}
	if len(ds) > c.maxDescriptors {
		return nil, rpc.ToStatus(&limiter.InputError{Field: "descriptors", Bound: true,
			Reason: fmt.Sprintf("%d descriptors in one request, the bound is %d", len(ds), c.maxDescriptors)})
	}
	domain := req.GetDomain()
	root := c.domains[domain]
	checks := make([]check, len(ds))
	replaced := map[string]bool{}
	for i, d := range ds {
		entries := make([]pair, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[j] = pair{e.GetKey(), e.GetValue()}
		}
		ch := &checks[i]
		switch {
		case root == nil || len(entries) == 0:
		case d.GetLimit() != nil:
			var err error
			if ch.rule, err = overrideRule(d.GetLimit(), c.algorithm, "descriptors["+strconv.Itoa(i)+"]"); err != nil {
				return nil, rpc.ToStatus(err)
			}
			ch.metric, ch.fold = overrideMetric(entries)
		default:
			f := root.match(entries)
			ch.rule, entries, ch.metric = f.rule, f.entries, f.metric
			if f.rule != nil && f.metric != f.rule.statKey {
				ch.fold = f.rule.statKey
			}
		}
		if ch.rule == nil {
			continue
		}
		for _, name := range ch.rule.replaces {
			replaced[name] = true
		}
		cost := int64(req.GetHitsAddend())
		if cost == 0 {
			cost = 1
		}
		if h := d.GetHitsAddend(); h != nil {
			cost = int64(min(h.GetValue(), math.MaxInt64))
			ch.peek = cost == 0
		}
		ch.entry = limiter.Entry{Key: c.key(domain, entries), Limit: ch.rule.limit, Cost: cost}
		if d.GetIsNegativeHits() {
			// Giving uses back is not supported: answer without counting.
			ch.peek = true
			ch.entry.Cost = 0
		}
	}
	var pending []int
	for i := range checks {
		ch := &checks[i]
		if ch.rule != nil && ch.rule.name != "" && replaced[ch.rule.name] {
			ch.rule = nil // replaced by another descriptor's limit: not counted
		}
		if ch.status = s.static(c, domain, ch); ch.status == nil {
			pending = append(pending, i)
		}
	}
	errs := make([]error, len(checks))
	parallel(len(pending), maxParallel, func(k int) {
		i := pending[k]
		checks[i].status, errs[i] = s.count(ctx, c, domain, &checks[i])
	})
	if err := errors.Join(errs...); err != nil {
		return nil, rpc.ToStatus(err)
	}
	resp, globalShadow := c.response(checks)
	if globalShadow {
		s.stats.globalShadow.Add(1)
	}
	return resp, nil
}

// parallel runs fn(0..n-1) on at most limit goroutines, the caller's
// among them, and returns when all are done.
func parallel(n, limit int, fn func(int)) {
	var next atomic.Int64
	work := func() {
		for k := int(next.Add(1) - 1); k < n; k = int(next.Add(1) - 1) {
			fn(k)
		}
	}
	var wg sync.WaitGroup
	for range min(n, limit) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}

// response builds the answer: the statuses, the overall code (quota_mode
// descriptors turn it OVER_LIMIT only when all of them are over, as in
// envoy) and, when configured, the RateLimit headers.
func (c *compiled) response(checks []check) (resp *rlsv3.RateLimitResponse, globalShadow bool) {
	resp = &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(checks))}
	var overRate, quotas, overQuota int
	shadowed := false
	var closest *rlsv3.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for i := range checks {
		st := checks[i].status
		resp.Statuses[i] = st
		// As envoy does: the headers follow the descriptor with the
		// fewest uses left, or the last one over its limit.
		if st.GetCurrentLimit() != nil && st.GetLimitRemaining() < least {
			closest, least = st, st.GetLimitRemaining()
		}
		quota := checks[i].rule != nil && checks[i].rule.quota
		if quota {
			quotas++
		}
		shadowed = shadowed || checks[i].shadowed
		if st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			continue
		}
		if quota {
			overQuota++
		} else {
			overRate++
			closest, least = st, 0
		}
	}
	if overRate > 0 || (quotas > 0 && overQuota == quotas) {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		if shadowed || c.shadowMode {
			// Config.ShadowMode, or the store is in shadow mode (a
			// node's --shadow): envoy's global shadow mode
			// (SHADOW_MODE), which answers OK overall, keeps the
			// descriptors' statuses, and counts it. (Without
			// Config.ShadowMode a store in shadow mode cannot turn
			// OK a refusal that never reached it: requests_per_unit 0,
			// a cost above the limit.)
			resp.OverallCode, globalShadow = rlsv3.RateLimitResponse_OK, true
		}
	}
	if c.headers && closest != nil {
		resp.ResponseHeadersToAdd = c.rateLimitHeaders(closest)
	}
	return resp, globalShadow
}

// static answers the descriptors that need no store: no rule, unlimited,
// requests_per_unit 0, or a cost above the limit.
func (s *Service) static(c *compiled, domain string, ch *check) *rlsv3.RateLimitResponse_DescriptorStatus {
	r := ch.rule
	switch {
	case r == nil:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	case r.unlimited:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	case r.limit.Uses == 0 || ch.entry.Cost > r.limit.Uses:
		if !ch.peek {
			s.record(c, domain, ch, 0, true)
		}
		wait := r.limit.Window
		if r.limit.Algorithm == limiter.FixedWindow {
			// As envoyproxy/ratelimit answers: the end of the current window.
			now := c.clock.Now().UnixMicro()
			_, end := limiter.FixedBounds(now, r.limit)
			wait = limiter.MicrosDuration(end - now)
		}
		return c.over(r, wait)
	}
	return nil
}

// record counts a descriptor's hits in its metrics; before is the
// counter before the request.
func (s *Service) record(c *compiled, domain string, ch *check, before int64, over bool) {
	if ch.metric == "" && ch.fold == "" {
		return
	}
	st := s.stats.get(domain, ch.metric, ch.fold != "", ch.fold, c.maxMetricKeys)
	st.record(uint64(ch.rule.limit.Uses), uint64(max(before, 0)), uint64(ch.entry.Cost), over, ch.rule.shadow)
}

// untilReset is duration_until_reset as envoyproxy/ratelimit writes it:
// whole seconds, rounded up (its "unit - now % unit" on whole Unix seconds
// is the same figure for a window that ends on a whole second).
func untilReset(d time.Duration) *durationpb.Duration {
	if r := d % time.Second; r > 0 {
		d += time.Second - r
	}
	return durationpb.New(d)
}

func (c *compiled) over(r *rule, wait time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: r.current(), DurationUntilReset: untilReset(wait)}
	if r.shadow {
		st.Code = rlsv3.RateLimitResponse_OK
	}
	return st
}

// count asks the store for one descriptor.
func (s *Service) count(ctx context.Context, c *compiled, domain string, ch *check) (*rlsv3.RateLimitResponse_DescriptorStatus, error) {
	batch := []limiter.Entry{ch.entry}
	var v limiter.Verdict
	var err error
	if ch.peek {
		batch[0].Cost = 0
		v, err = s.store.PeekMany(ctx, batch)
	} else {
		v, err = s.store.ConsumeMany(ctx, batch)
	}
	if err != nil {
		return nil, err
	}
	// A shadowed verdict is a refusal the store's shadow mode let
	// through: nothing was recorded, and the descriptor is over its limit.
	refused := !v.Allowed || v.Shadowed
	ch.shadowed = v.Shadowed
	if !ch.peek {
		// The counter before this request: what is used now, less this
		// request's hits when it was recorded (a refusal records none).
		used := ch.rule.limit.Uses - min(max(v.Remaining, 0), ch.rule.limit.Uses)
		if !refused {
			used -= ch.entry.Cost
		}
		s.record(c, domain, ch, used, refused)
	}
	if ch.peek {
		// A look (0 hits) took nothing: what it saw is the remaining
		// uses, and a full counter is OK at 0 remaining, as in envoy.
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: ch.rule.current(), DurationUntilReset: untilReset(v.RetryAfter)}
		if refused {
			return st, nil
		}
		v.Remaining++
	} else if refused {
		return c.over(ch.rule, v.RetryAfter), nil
	}
	reset := time.Duration(0)
	if !v.ResetAt.IsZero() {
		// ResetAt is on the owner's clock, anchored to wall time: close
		// to, not exactly, this node's.
		reset = min(max(v.ResetAt.Sub(c.clock.Now()), 0), 2*ch.rule.limit.Window)
	}
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               rlsv3.RateLimitResponse_OK,
		CurrentLimit:       ch.rule.current(),
		LimitRemaining:     uint32(min(max(v.Remaining, 0), math.MaxUint32)),
		DurationUntilReset: untilReset(reset),
	}, nil
}

// overrideRule is the limit a request carries in its descriptor (Envoy's
// "limit" override, with its unit_multiplier); shadow mode does not apply
// to it, as in envoy.
func overrideRule(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride, alg limiter.Algorithm, path string) (*rule, error) {
	u, ok := units[strings.ToLower(o.GetUnit().String())]
	if !ok {
		return nil, &limiter.InputError{Field: path + ".limit.unit", Reason: "unknown unit " + o.GetUnit().String()}
	}
	r := &rule{unit: u.unit, limit: unitLimit(u.unit, u.window, alg, int64(o.GetRequestsPerUnit()))}
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
		r.multiplier = m.GetValue()
		r.limit.Calendar = limiter.NoCalendar // m months: m × 30 days from the epoch
		r.limit.Window *= time.Duration(m.GetValue())
	}
	return r, nil
}
