package ringlimit

import "github.com/prometheus/client_golang/prometheus"

// The lease metrics (issue #21), from owner.Router.LeaseStats (the leases
// the node granted) and its holder's table (those it holds); none when
// leases are off.
var (
	descLeasesGranted  = prometheus.NewDesc("ringlimit_leases_granted_total", "Leases this node granted (keys it owns).", nil, nil)
	descLeasesReturned = prometheus.NewDesc("ringlimit_leases_returned_total", "Leases given back to this node.", nil, nil)
	descLeasesExpired  = prometheus.NewDesc("ringlimit_leases_expired_total", "Leases never given back (their holders died or lost touch): their uses stayed counted until the lease's end plus the window.", nil, nil)
	descLeasesRecalled = prometheus.NewDesc("ringlimit_leases_recalled_total", "Leases given back on a recall, before a refusal.", nil, nil)
	descLeasesUnrepl   = prometheus.NewDesc("ringlimit_leases_unreplicated_total", "Leases taken back before they went out because their reservation did not reach every replica (a crash would have over-admitted them).", nil, nil)
	descLeaseUses      = prometheus.NewDesc("ringlimit_lease_uses_total", "Uses decided by leaseholders in their own processes, as their returns reported them.", nil, nil)
	descLeaseHeldOut   = prometheus.NewDesc("ringlimit_lease_uses_held_out", "Uses out on leases now: budget reserved for holders and not yet given back.", nil, nil)

	// The holder's side: leases this node holds of keys its peers own.
	descHeldGranted  = prometheus.NewDesc("ringlimit_held_leases_granted_total", "Leases this node received from the owners of keys it was called for.", nil, nil)
	descHeldReturned = prometheus.NewDesc("ringlimit_held_leases_returned_total", "Leases this node gave back (ended, spent, recalled, or at close).", nil, nil)
	descHeldRecalled = prometheus.NewDesc("ringlimit_held_leases_recalled_total", "Leases this node gave back because their owner recalled them.", nil, nil)
	descHeldLocal    = prometheus.NewDesc("ringlimit_lease_local_decisions_total", "Calls this node decided from leases it held, without asking the owner.", nil, nil)
	descHeldNow      = prometheus.NewDesc("ringlimit_held_leases", "Leases this node holds now.", nil, nil)
)

// leaseCollector reads the router's lease counters at scrape time.
type leaseCollector struct{ n *Node }

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeasesGranted, descLeasesReturned, descLeasesExpired, descLeasesRecalled, descLeasesUnrepl, descLeaseUses, descLeaseHeldOut, descHeldGranted, descHeldReturned, descHeldRecalled, descHeldLocal, descHeldNow} {
		ch <- d
	}
}

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	if h := c.n.holder; h != nil {
		hs := h.Table().Stats()
		counter(descHeldGranted, hs.Granted.Load())
		counter(descHeldReturned, hs.Returned.Load())
		counter(descHeldRecalled, hs.Recalled.Load())
		counter(descHeldLocal, hs.Local.Load())
		ch <- prometheus.MustNewConstMetric(descHeldNow, prometheus.GaugeValue, float64(h.Table().Held()))
	}
	if c.n.router == nil {
		return
	}
	s := c.n.router.LeaseStats()
	if s == nil {
		return
	}
	counter(descLeasesGranted, s.Granted.Load())
	counter(descLeasesReturned, s.Returned.Load())
	counter(descLeasesExpired, s.Expired.Load())
	counter(descLeasesRecalled, s.Recalled.Load())
	counter(descLeasesUnrepl, s.Unreplicated.Load())
	counter(descLeaseUses, s.Used.Load())
	ch <- prometheus.MustNewConstMetric(descLeaseHeldOut, prometheus.GaugeValue, float64(s.HeldOut.Load()))
}
