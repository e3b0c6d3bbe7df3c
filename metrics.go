package ringlimit

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringlimit/ringlimit/limiter"
)

// metrics are the node's Prometheus metrics, every name prefixed
// "ringlimit_", plus the Go runtime's (go_*) and the process's (process_*)
// on the node's own registry. Counters kept elsewhere (router, fallback,
// engine) are read at scrape time, so the hot path pays only for decisions
// and their latency.
type metrics struct {
	reg        *prometheus.Registry
	collectors []prometheus.Collector
	decisions  *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	shadowed   *prometheus.CounterVec
	unnamed    *limitMetrics                            // limit=""
	named      atomic.Pointer[map[string]*limitMetrics] // copied on write: names are few
	mu         sync.Mutex                               // serialises writers of named
}

// limitMetrics are one limit name's series, made once so the hot path
// pays no label lookup.
type limitMetrics struct {
	decisions [5][3]prometheus.Counter // [algorithm][allowed, refused, error]
	latency   prometheus.Observer
	shadowed  prometheus.Counter
}

var resultNames = [3]string{"allowed", "refused", "error"}

// MaxLimitNames bounds the limit label of the decision metrics: past this
// many distinct Limit.Name values (names come from configuration, so a
// fleet has a few), further names are counted under limit="(other)".
const MaxLimitNames = 128

// otherLimits labels the names past MaxLimitNames.
const otherLimits = "(other)"

func newMetrics(n *Node) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_decisions_total", Help: "Calls answered by this node, by the first entry's algorithm and limit name (\"\": unnamed) and the result (refused includes the calls --shadow let through).",
	}, []string{"algorithm", "limit", "result"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ringlimit_decision_seconds", Help: "Time to answer a call, forwarding included, by the first entry's limit name.",
		Buckets: []float64{5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1},
	}, []string{"limit"})
	m.shadowed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ringlimit_shadow_refusals_total", Help: "Calls the limits refused that shadow mode (--shadow) let through, by the first entry's limit name; also counted as refused in ringlimit_decisions_total.",
	}, []string{"limit"})
	m.unnamed = m.newLimit("")
	empty := map[string]*limitMetrics{}
	m.named.Store(&empty)
	m.collectors = []prometheus.Collector{m.decisions, m.latency, m.shadowed, &nodeCollector{n: n}, &leaseCollector{n: n}}
	m.reg.MustRegister(m.collectors...)
	// The runtime and process collectors go on the node's registry only,
	// not in collectors: a host's Registerer (Config.Registerer) usually
	// has its own, and a second copy would be refused as a duplicate.
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) newLimit(name string) *limitMetrics {
	lm := &limitMetrics{latency: m.latency.WithLabelValues(name), shadowed: m.shadowed.WithLabelValues(name)}
	for a := range len(lm.decisions) {
		for r := range 3 {
			lm.decisions[a][r] = m.decisions.WithLabelValues(limiter.Algorithm(a).String(), name, resultNames[r])
		}
	}
	return lm
}

// limit returns the series of a limit name: made on first use, up to
// MaxLimitNames names, then otherLimits. A name no store accepts (the
// call failed on it) is counted as unnamed: a label must be UTF-8.
func (m *metrics) limit(name string) *limitMetrics {
	if name == "" {
		return m.unnamed
	}
	if lm := (*m.named.Load())[name]; lm != nil {
		return lm
	}
	if limiter.CheckName(name) != nil {
		return m.unnamed
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := *m.named.Load()
	if lm := cur[name]; lm != nil {
		return lm
	}
	if len(cur) >= MaxLimitNames {
		name = otherLimits
		if lm := cur[name]; lm != nil {
			return lm
		}
	}
	next := make(map[string]*limitMetrics, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	lm := m.newLimit(name)
	next[name] = lm
	m.named.Store(&next)
	return lm
}

func (m *metrics) observe(entries []limiter.Entry, v limiter.Verdict, err error, start time.Time) {
	a := 0
	name := ""
	if len(entries) > 0 {
		if entries[0].Limit.Algorithm.Valid() {
			a = int(entries[0].Limit.Algorithm)
		}
		name = entries[0].Limit.Name
	}
	r := 0
	switch {
	case err != nil:
		r = 2
	case !v.Allowed || v.Shadowed:
		r = 1
	}
	lm := m.limit(name)
	lm.decisions[a][r].Inc()
	lm.latency.Observe(time.Since(start).Seconds())
	if v.Shadowed && err == nil {
		lm.shadowed.Inc()
	}
}

// Gatherer returns the node's metrics registry, for a host that serves
// metrics itself (Config.Registerer registers them on the host's registry).
func (n *Node) Gatherer() prometheus.Gatherer { return n.metrics.reg }

func (n *Node) mountMetrics(mux *http.ServeMux) {
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
}

// nodeCollector reads the router's, the fallback's and the cluster's
// counters at scrape time.
type nodeCollector struct{ n *Node }

var (
	descForwards    = prometheus.NewDesc("ringlimit_forwards_total", "Calls forwarded to their owner.", nil, nil)
	descForwardRPCs = prometheus.NewDesc("ringlimit_forward_rpcs_total", "Forward RPCs sent (forwards / RPCs is the mean batch size).", nil, nil)
	descForwardErrs = prometheus.NewDesc("ringlimit_forward_errors_total", "Forward RPCs that failed or timed out.", nil, nil)
	descServed      = prometheus.NewDesc("ringlimit_forwarded_served_total", "Calls this node decided for peers.", nil, nil)
	descLocal       = prometheus.NewDesc("ringlimit_local_decisions_total", "Calls decided by this node's engine for its own callers.", nil, nil)
	descFallbacks   = prometheus.NewDesc("ringlimit_fallbacks_total", "Verdicts decided by the failure policy.", []string{"policy"}, nil)
	descLate        = prometheus.NewDesc("ringlimit_late_released_total", "Uses of verdicts that arrived after their caller left, given back.", nil, nil)
	descHandedOff   = prometheus.NewDesc("ringlimit_handoff_sent_total", "Counters handed off to a new owner.", nil, nil)
	descReceived    = prometheus.NewDesc("ringlimit_handoff_received_total", "Counters received by hand-off.", nil, nil)
	descReplicated  = prometheus.NewDesc("ringlimit_replicated_total", "Counter states sent to successors.", nil, nil)
	descAdopted     = prometheus.NewDesc("ringlimit_adopted_total", "Replicated counters adopted after an owner left.", nil, nil)
	descFetched     = prometheus.NewDesc("ringlimit_fetched_total", "Counters fetched on first use after a ring change.", nil, nil)
	descFetchHeld   = prometheus.NewDesc("ringlimit_fetch_held_total", "First-use fetches answered by a node that keeps counting the key (rings disagreed): calls passed on to it.", nil, nil)
	descCacheHits   = prometheus.NewDesc("ringlimit_refusal_cache_hits_total", "Refusals answered from the refusal cache.", nil, nil)
	descKeys        = prometheus.NewDesc("ringlimit_keys", "Live counters this node holds: role=owner the keys it counts, role=replica the replicas it holds for other owners; both count toward --max-keys.", []string{"role"}, nil)
	descHandRefused = prometheus.NewDesc("ringlimit_handoff_refused_total", "Handed-off counter states refused at --max-keys (the sender keeps them and retries).", nil, nil)
	descReplRefused = prometheus.NewDesc("ringlimit_replicas_refused_total", "Replicated counter states refused at --max-keys (an owner's crash may lose their counts).", nil, nil)
	descMembers     = prometheus.NewDesc("ringlimit_ring_members", "Members on this node's ring.", nil, nil)
	descHealth      = prometheus.NewDesc("ringlimit_memberlist_health_score", "memberlist's health score (0 is healthy).", nil, nil)
	descPeerCalls   = prometheus.NewDesc("ringlimit_peer_forwards_total", "Calls forwarded to one peer (forwards / RPCs is that peer's mean batch size).", []string{"peer"}, nil)
	descPeerRPCs    = prometheus.NewDesc("ringlimit_peer_forward_rpcs_total", "Forward RPCs sent to one peer.", []string{"peer"}, nil)
	descPeerErrors  = prometheus.NewDesc("ringlimit_peer_forward_errors_total", "Forward RPCs to one peer that failed or timed out.", []string{"peer"}, nil)
)

var (
	// The ring's version is a 64-bit hash: as a float sample it would lose
	// its low bits, so it travels as a label of an info metric (always 1).
	descRingInfo = prometheus.NewDesc("ringlimit_ring_info", "This node's ring: version is its 64-bit hash of the members, in hex (equal on every node once they agree).", []string{"version"}, nil)
	descMaxKeys  = prometheus.NewDesc("ringlimit_max_keys", "The configured --max-keys (0: no bound).", nil, nil)
	descReplLag  = prometheus.NewDesc("ringlimit_replication_lag_seconds", "How long the oldest counter change not yet shipped to the successors has waited (0: all shipped).", nil, nil)
	descReplErrs = prometheus.NewDesc("ringlimit_replication_errors_total", "Replication RPCs that failed (that successor lacks those changes until the counters change again).", nil, nil)
)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descForwards, descForwardRPCs, descForwardErrs, descServed, descLocal, descFallbacks, descLate,
		descHandedOff, descReceived, descReplicated, descAdopted, descFetched, descFetchHeld, descCacheHits, descKeys, descHandRefused, descReplRefused, descMembers, descRingInfo, descHealth,
		descMaxKeys, descReplLag, descReplErrs, descPeerCalls, descPeerRPCs, descPeerErrors} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	st, fs := n.router.Stats(), n.peers.Stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter(descForwards, fs.Calls.Load())
	counter(descForwardRPCs, fs.RPCs.Load())
	counter(descForwardErrs, fs.Errors.Load())
	counter(descServed, st.Served.Load())
	counter(descLocal, st.Local.Load())
	fb := n.fb.Stats()
	counter(descFallbacks, fb.Fallbacks, n.cfg.Fallback.String())
	counter(descLate, fs.Released.Load()+fb.LateReleased)
	counter(descHandedOff, st.HandedOff.Load())
	counter(descReceived, st.Received.Load())
	counter(descReplicated, st.Replicated.Load())
	counter(descAdopted, st.Adopted.Load())
	counter(descFetched, st.Fetched.Load())
	counter(descFetchHeld, st.FetchHeld.Load())
	counter(descCacheHits, st.CacheHits.Load())
	counter(descHandRefused, st.HandOffRefused.Load())
	counter(descReplRefused, st.ReplicasRefused.Load())
	ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(n.engine.Live()), "owner")
	ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(n.router.Replicas().Live()), "replica")
	rg := n.members.Ring()
	gauge(descMembers, float64(rg.Len()))
	gauge(descMaxKeys, float64(n.cfg.Bounds.MaxKeys))
	ch <- prometheus.MustNewConstMetric(descRingInfo, prometheus.GaugeValue, 1, fmt.Sprintf("%016x", rg.Version()))
	gauge(descReplLag, n.router.ReplicationLag().Seconds())
	counter(descReplErrs, st.ReplicateErrors.Load())
	if cl := n.members.Cluster(); cl != nil {
		gauge(descHealth, float64(cl.Health()))
	}
	for peer, ps := range n.peers.PeerStats() {
		counter(descPeerCalls, ps.Calls.Load(), peer)
		counter(descPeerRPCs, ps.RPCs.Load(), peer)
		counter(descPeerErrors, ps.Errors.Load(), peer)
	}
}
