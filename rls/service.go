package rls

import (
	"context"
	"errors"
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
	s := &Service{store: store}
	s.cfg.Store(c)
	return s, nil
}

// Reload replaces the rules; calls under way finish with the old ones. A
// bad cfg leaves the service unchanged.
func (s *Service) Reload(cfg Config) error {
	c, err := compile(cfg)
	if err != nil {
		return err
	}
	s.cfg.Store(c)
	return nil
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
	status *rlsv3.RateLimitResponse_DescriptorStatus
}

// ShouldRateLimit decides a request. Each descriptor finds its rule (see
// the package documentation) and is counted on its own, as in envoy's
// reference service: a request over the limit in one descriptor still
// counts in the others. The overall code is OVER_LIMIT when any
// descriptor is. A store error fails the whole call (Envoy's
// failure_mode_deny then decides); bad requests get InvalidArgument.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	c := s.cfg.Load()
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rls: domain: must not be empty")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rls: descriptors: must not be empty")
	}
	root := c.domains[req.GetDomain()]
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
		default:
			ch.rule = root.match(entries)
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
		ch.entry = limiter.Entry{Key: c.key(req.GetDomain(), entries), Limit: ch.rule.limit, Cost: cost}
		if d.GetIsNegativeHits() {
			// Giving uses back is not supported: answer without counting.
			ch.peek = true
			ch.entry.Cost = 0
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(checks))
	for i := range checks {
		ch := &checks[i]
		if ch.rule != nil && ch.rule.name != "" && replaced[ch.rule.name] {
			ch.rule = nil // replaced by another descriptor's limit: not counted
		}
		if ch.status = c.static(ch); ch.status != nil {
			continue
		}
		wg.Go(func() { ch.status, errs[i] = c.count(ctx, s.store, ch) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, rpc.ToStatus(err)
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(checks))}
	for i := range checks {
		resp.Statuses[i] = checks[i].status
		if checks[i].status.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	return resp, nil
}

// static answers the descriptors that need no store: no rule, unlimited,
// requests_per_unit 0, or a cost above the limit.
func (c *compiled) static(ch *check) *rlsv3.RateLimitResponse_DescriptorStatus {
	r := ch.rule
	switch {
	case r == nil:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	case r.unlimited:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	case r.limit.Uses == 0 || ch.entry.Cost > r.limit.Uses:
		return c.over(r, r.limit.Window)
	}
	return nil
}

func (c *compiled) over(r *rule, wait time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: r.current(), DurationUntilReset: durationpb.New(wait)}
	if r.shadow {
		st.Code = rlsv3.RateLimitResponse_OK
	}
	return st
}

// count asks the store for one descriptor.
func (c *compiled) count(ctx context.Context, store limiter.Store, ch *check) (*rlsv3.RateLimitResponse_DescriptorStatus, error) {
	batch := []limiter.Entry{ch.entry}
	var v limiter.Verdict
	var err error
	if ch.peek {
		batch[0].Cost = 0
		v, err = store.PeekMany(ctx, batch)
	} else {
		v, err = store.ConsumeMany(ctx, batch)
	}
	if err != nil {
		return nil, err
	}
	if ch.peek {
		// A look (0 hits) took nothing: what it saw is the remaining
		// uses, and a full counter is OK at 0 remaining, as in envoy.
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: ch.rule.current(), DurationUntilReset: durationpb.New(v.RetryAfter)}
		if v.Allowed {
			v.Remaining++
		} else {
			return st, nil
		}
	} else if !v.Allowed {
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
		DurationUntilReset: durationpb.New(reset),
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
	r := &rule{unit: u.unit, limit: limiter.Limit{Algorithm: alg, Uses: int64(o.GetRequestsPerUnit()), Window: u.window}}
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
		r.multiplier = m.GetValue()
		r.limit.Window *= time.Duration(m.GetValue())
	}
	return r, nil
}
