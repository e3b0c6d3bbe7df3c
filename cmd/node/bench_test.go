package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// The histogram against a sorted slice: every quantile within one bucket
// (1/32) above the exact value, never under it.
func TestHistogramQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h histogram
	var vals []int64
	for range 100_000 {
		v := int64(r.ExpFloat64() * 200_000) // ~200 µs, long tail
		if r.IntN(100) == 0 {
			v = r.Int64N(50) // some tiny values, in the exact range
		}
		h.record(v)
		vals = append(vals, v)
	}
	slices.Sort(vals)
	for _, q := range []float64{0, 0.001, 0.5, 0.9, 0.99, 0.999, 1} {
		rank := int(q*float64(len(vals)) + 0.999999)
		rank = max(rank, 1)
		exact := vals[rank-1]
		got := h.quantile(q)
		if got < exact || float64(got) > float64(exact)*(1+1.0/32)+1 {
			t.Errorf("quantile %v = %d, exact %d: want within [exact, exact*(1+1/32)]", q, got, exact)
		}
	}
	if h.max != vals[len(vals)-1] || h.n != uint64(len(vals)) {
		t.Errorf("max %d n %d, want %d %d", h.max, h.n, vals[len(vals)-1], len(vals))
	}
}

// Every bucket's range is contiguous with the next, and indexes stay in
// the array for any int64.
func TestHistogramBuckets(t *testing.T) {
	for i := 0; i < histBuckets-1; i++ {
		hi := histHigh(i)
		if hi < 0 || hi == 1<<63-1 {
			break // the last bucket ends at the largest int64
		}
		if histIndex(hi) != i || histIndex(hi+1) != i+1 {
			t.Fatalf("bucket %d ends at %d: index(%d)=%d index(%d)=%d", i, hi, hi, histIndex(hi), hi+1, histIndex(hi+1))
		}
	}
	if i := histIndex(1<<63 - 1); i >= histBuckets {
		t.Fatalf("max int64 in bucket %d of %d", i, histBuckets)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		var h histogram
		h.record(12345)
	})
	if allocs != 0 {
		t.Fatalf("record allocates %v times", allocs)
	}
}

func TestMaxOveradmit(t *testing.T) {
	const W = 1000 // µs
	cases := []struct {
		name string
		adm  []admission
		uses int64
		want int64
	}{
		{"at the limit", []admission{{1, 0, 10}, {1, 100, 110}, {1, 200, 210}}, 3, 0},
		{"one over, inside a window", []admission{{1, 0, 10}, {1, 100, 110}, {1, 200, 210}, {1, 900, 990}}, 3, 1},
		// The 4th call's verdict came back at 1000: it may have been
		// recorded at 1000, a full window after the first: not certain.
		{"unsure: reply at the window's end", []admission{{1, 0, 10}, {1, 100, 110}, {1, 200, 210}, {1, 900, 1000}}, 3, 0},
		{"spread over two windows", []admission{{1, 0, 10}, {1, 500, 510}, {1, 1000, 1010}, {1, 1500, 1510}}, 2, 0},
		{"keys apart", []admission{{1, 0, 10}, {2, 1, 11}, {1, 2, 12}, {2, 3, 13}}, 2, 0},
		{"two over on key 2", []admission{{1, 0, 10}, {2, 1, 11}, {2, 2, 12}, {2, 3, 13}, {2, 4, 14}}, 2, 2},
		// A slow call sent first, answered late: the others count from
		// their own earliest send.
		{"slow first call", []admission{{1, 0, 5000}, {1, 100, 110}, {1, 200, 210}, {1, 300, 310}}, 2, 1},
	}
	for _, c := range cases {
		got, key := maxOveradmit(slices.Clone(c.adm), c.uses, W)
		if got != c.want {
			t.Errorf("%s: %d (key %d), want %d", c.name, got, key, c.want)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP ringlimit_forwards_total Calls forwarded.
# TYPE ringlimit_forwards_total counter
ringlimit_forwards_total 1.234567e+06
ringlimit_forward_rpcs_total 4096
ringlimit_decisions_total{algorithm="sliding-log",result="allowed"} 7
`
	m, err := parseMetrics(bufio.NewScanner(strings.NewReader(text)))
	if err != nil {
		t.Fatal(err)
	}
	if m["ringlimit_forwards_total"] != 1234567 || m["ringlimit_forward_rpcs_total"] != 4096 || len(m) != 2 {
		t.Fatalf("parsed %v", m)
	}
}

func TestBenchHTTPAddrs(t *testing.T) {
	o := benchOptions{clientOptions: clientOptions{server: "127.0.0.1:7947, 127.0.0.1:7957"}}
	if got := o.httpAddrs(); !slices.Equal(got, []string{"127.0.0.1:7948", "127.0.0.1:7958"}) {
		t.Errorf("derived %q", got)
	}
	o.http = "h:1,h:2"
	if got := o.httpAddrs(); !slices.Equal(got, []string{"h:1", "h:2"}) {
		t.Errorf("--http %q", got)
	}
}

// A fleet with TLS serves /metrics over HTTPS: the bench reads it with the
// client's TLS configuration, and plain HTTP when it has none.
func TestScrapeAllHTTPS(t *testing.T) {
	metrics := func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ringlimit_forwards_total 7") }
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(metrics))
	defer tlsSrv.Close()
	plainSrv := httptest.NewServer(http.HandlerFunc(metrics))
	defer plainSrv.Close()
	tlsCfg := tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig
	ctx := context.Background()
	for _, c := range []struct {
		name string
		addr string
		cfg  *tls.Config
	}{{"https", tlsSrv.Listener.Addr().String(), tlsCfg}, {"http", plainSrv.Listener.Addr().String(), nil}} {
		m, err := scrapeAll(ctx, []string{c.addr, c.addr}, c.cfg)
		if err != nil || m["ringlimit_forwards_total"] != 14 {
			t.Errorf("%s: %v %v; want ringlimit_forwards_total summed to 14", c.name, m, err)
		}
	}
	if _, err := scrapeAll(ctx, []string{tlsSrv.Listener.Addr().String()}, nil); err == nil {
		t.Error("plain HTTP to the HTTPS server: no error")
	}
}
