package rls

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// nearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO default: a
// hit is near the limit once the counter passes 80% of it.
const nearLimitRatio float32 = 0.8

// The service's metrics. They are envoyproxy/ratelimit's statistics
// (ratelimit.service.rate_limit.DOMAIN.KEY.total_hits and so on) under the
// names its statsd-to-Prometheus mapping gives them
// (ratelimit_service_rate_limit_total_hits{domain,key1,key2}), with two
// differences a Prometheus user expects: every counter ends in _total,
// and the whole descriptor key is one label, key (the mapping's key1,
// key2, ... joined by "."), so no level is cut off.
var (
	statLabels    = []string{"domain", "key"}
	descTotalHits = prometheus.NewDesc("ratelimit_service_rate_limit_total_hits_total",
		"Hits (hits_addend) on a limit, per domain and descriptor key: envoy ratelimit's total_hits.", statLabels, nil)
	descOverLimit = prometheus.NewDesc("ratelimit_service_rate_limit_over_limit_total",
		"Hits past the limit (the part of hits_addend over it): envoy ratelimit's over_limit.", statLabels, nil)
	descNearLimit = prometheus.NewDesc("ratelimit_service_rate_limit_near_limit_total",
		"Hits between 80% of the limit and the limit: envoy ratelimit's near_limit.", statLabels, nil)
	descWithinLimit = prometheus.NewDesc("ratelimit_service_rate_limit_within_limit_total",
		"Hits of requests answered within the limit: envoy ratelimit's within_limit.", statLabels, nil)
	descShadowMode = prometheus.NewDesc("ratelimit_service_rate_limit_shadow_mode_total",
		"Hits past the limit of a shadow_mode rule, answered OK: envoy ratelimit's shadow_mode.", statLabels, nil)
	descGlobalShadow = prometheus.NewDesc("ratelimit_service_global_shadow_mode_total",
		"Requests answered OK only because the store is in shadow mode (a node's --shadow): envoy ratelimit's global_shadow_mode.", nil, nil)
	descLoadOK = prometheus.NewDesc("ratelimit_service_config_load_success_total",
		"Configurations loaded (at start and by a watched change): envoy ratelimit's config_load_success.", nil, nil)
	descLoadErr = prometheus.NewDesc("ratelimit_service_config_load_error_total",
		"Configuration changes refused (the service kept its rules): envoy ratelimit's config_load_error.", nil, nil)
)

// series are one domain and key's counters, envoy's RateLimitStats.
type series struct {
	total, over, near, within, shadow atomic.Uint64
}

type seriesID struct{ domain, key string }

// stats holds the service's series. Keys built from request values
// (detailed_metric, value_to_metric, limit overrides) are bounded: past
// max of them, a descriptor is counted under its rule's key.
type stats struct {
	mu           sync.RWMutex
	series       map[seriesID]*series
	runtime      int // series of keys built from request values
	globalShadow atomic.Uint64
	loadOK       atomic.Uint64
	loadErr      atomic.Uint64
}

func newStats() *stats { return &stats{series: map[seriesID]*series{}} }

// get returns the series of domain and key. A runtime key (one built
// from request values) is folded into fold once max runtime keys exist.
func (st *stats) get(domain, key string, runtime bool, fold string, max int) *series {
	id := seriesID{domain, key}
	st.mu.RLock()
	s := st.series[id]
	st.mu.RUnlock()
	if s != nil {
		return s
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if s = st.series[id]; s != nil {
		return s
	}
	if runtime {
		if st.runtime >= max {
			id.key = fold
			if s = st.series[id]; s != nil {
				return s
			}
		} else {
			st.runtime++
		}
	}
	s = &series{}
	st.series[id] = s
	return s
}

// record counts hits on a limit, as envoy's base limiter does. before is
// the counter before this request, limit the rule's requests_per_unit,
// over whether the request was refused (ringlimit records nothing for a
// refusal, so before is what the counter held). Of the hits, those past
// the limit are over_limit (and shadow_mode for a shadow rule), those
// between 80% of the limit and the limit near_limit; a request within
// the limit adds all its hits to within_limit.
func (s *series) record(limit, before, hits uint64, over, shadow bool) {
	s.total.Add(hits)
	near := uint64(math.Floor(float64(float32(limit) * nearLimitRatio)))
	after := before + hits
	if !over {
		s.within.Add(hits)
		if after > near {
			s.near.Add(after - max(near, before))
		}
		return
	}
	past := hits
	if before < limit {
		past = after - limit
		s.near.Add(limit - max(near, before))
	}
	s.over.Add(past)
	if shadow {
		s.shadow.Add(past)
	}
}

// Collector returns the service's Prometheus metrics (see the package
// documentation); a ringlimit node registers it on its /metrics.
func (s *Service) Collector() prometheus.Collector { return s.stats }

func (st *stats) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTotalHits, descOverLimit, descNearLimit, descWithinLimit, descShadowMode, descGlobalShadow, descLoadOK, descLoadErr} {
		ch <- d
	}
}

func (st *stats) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	st.mu.RLock()
	defer st.mu.RUnlock()
	for id, s := range st.series {
		counter(descTotalHits, s.total.Load(), id.domain, id.key)
		counter(descOverLimit, s.over.Load(), id.domain, id.key)
		counter(descNearLimit, s.near.Load(), id.domain, id.key)
		counter(descWithinLimit, s.within.Load(), id.domain, id.key)
		counter(descShadowMode, s.shadow.Load(), id.domain, id.key)
	}
	counter(descGlobalShadow, st.globalShadow.Load())
	counter(descLoadOK, st.loadOK.Load())
	counter(descLoadErr, st.loadErr.Load())
}

// overrideMetric is the metric key of a descriptor that carries its own
// limit: envoy names it by the request's key_value pairs; past
// Config.MaxMetricKeys it is folded into the keys alone.
func overrideMetric(entries []pair) (metric, fold string) {
	var m, f strings.Builder
	for i, e := range entries {
		if i > 0 {
			m.WriteByte('.')
			f.WriteByte('.')
		}
		m.WriteString(e.key)
		f.WriteString(e.key)
		if e.value != "" {
			m.WriteString("_" + e.value)
		}
	}
	return m.String(), f.String()
}
