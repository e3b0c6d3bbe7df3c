package ringlimit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/ring"
)

// A node's /metrics carries the Go runtime's and the process's metrics,
// and a host registry that has its own Go collector still takes the
// node's collectors (the runtime ones stay on the node's registry only).
// (Checked by hand: without the two collectors in newMetrics this fails;
// with them in the collectors handed to Config.Registerer, Start fails
// with a duplicate registration.)
func TestMetricsRuntimeAndProcess(t *testing.T) {
	host := prometheus.NewRegistry()
	host.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tc := startCluster(t, 1, func(c *ringlimit.Config) { c.Registerer = host })
	m := scrape(t, tc.nodes[0])
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "go_gc_duration_seconds_count",
		"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"} {
		if _, ok := m[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	fams, err := host.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fams {
		found = found || f.GetName() == "ringlimit_decisions_total"
	}
	if !found {
		t.Error("the host registry lacks ringlimit_decisions_total")
	}
}

// ringlimit_ring_info carries the ring's 64-bit version exactly, as the
// hex of ring.Version (a float sample would keep only 53 bits), and every
// node of a converged cluster shows the same one; ringlimit_max_keys is
// the configured bound.
func TestMetricsRingInfoAndMaxKeys(t *testing.T) {
	tc := startCluster(t, 2, func(c *ringlimit.Config) { c.Bounds.MaxKeys = 12345 })
	waitRingsAgree(t, tc)
	rg, err := ring.New([]string{tc.nodes[0].Name(), tc.nodes[1].Name()}, ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%016x", rg.Version())
	for _, n := range tc.nodes {
		m := scrape(t, n)
		if got := ringVersion(m); got != want {
			t.Errorf("%s: ringlimit_ring_info version %q, want %q (ring.Version of the members)", n.Name(), got, want)
		}
		if v := m[`ringlimit_ring_info{version="`+want+`"}`]; v != 1 {
			t.Errorf("%s: ringlimit_ring_info = %v, want 1", n.Name(), v)
		}
		if _, ok := m["ringlimit_ring_version"]; ok {
			t.Errorf("%s: ringlimit_ring_version (a lossy float of the version) is still served", n.Name())
		}
		if v, ok := m["ringlimit_max_keys"]; !ok || v != 12345 {
			t.Errorf("%s: ringlimit_max_keys = %v (present %v), want 12345", n.Name(), v, ok)
		}
	}
	if m := scrape(t, startCluster(t, 1, nil).nodes[0]); m["ringlimit_max_keys"] != 0 {
		t.Errorf("ringlimit_max_keys without a bound = %v, want 0", m["ringlimit_max_keys"])
	}
}

// Replication's two signals are served: the lag of the oldest unshipped
// change (0 once idle) and the count of failed replication RPCs.
func TestMetricsReplication(t *testing.T) {
	tc := startCluster(t, 2, func(c *ringlimit.Config) { c.Replicas = 1 })
	waitRingsAgree(t, tc)
	n0 := tc.nodes[0]
	k := keyOwnedBy(t, n0, n0.Name(), "repl")
	if _, err := n0.ConsumeMany(context.Background(), []limiter.Entry{{Key: k, Limit: limiter.Limit{Uses: 5, Window: time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "replication lag back to 0", func() bool {
		m := scrape(t, n0)
		v, ok := m["ringlimit_replication_lag_seconds"]
		return ok && v == 0 && m["ringlimit_replicated_total"] >= 1
	})
	if v, ok := scrape(t, n0)["ringlimit_replication_errors_total"]; !ok || v != 0 {
		t.Errorf("ringlimit_replication_errors_total = %v (present %v), want 0 in a healthy cluster", v, ok)
	}
	for name := range scrape(t, n0) {
		if strings.HasPrefix(name, "ringlimit_ring_version") {
			t.Errorf("%s still served", name)
		}
	}
}
