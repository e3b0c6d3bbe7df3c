package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// scrapeAll reads the nodes' Prometheus text /metrics and sums each
// unlabelled sample over the nodes; over HTTPS with tlsCfg (a fleet with
// TLS serves HTTPS on its HTTP port), else plain HTTP.
func scrapeAll(ctx context.Context, addrs []string, tlsCfg *tls.Config) (map[string]float64, error) {
	if len(addrs) == 0 {
		return nil, errors.New("no HTTP address to read /metrics from (set --http)")
	}
	client, scheme := http.DefaultClient, "http://"
	if tlsCfg != nil {
		tr := &http.Transport{TLSClientConfig: tlsCfg}
		defer tr.CloseIdleConnections()
		client, scheme = &http.Client{Transport: tr}, "https://"
	}
	sum := map[string]float64{}
	for _, a := range addrs {
		m, err := scrape(ctx, client, scheme+a+"/metrics")
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			sum[k] += v
		}
	}
	return sum, nil
}

func scrape(ctx context.Context, client *http.Client, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read metrics: %s: %s", url, resp.Status)
	}
	return parseMetrics(bufio.NewScanner(resp.Body))
}

// parseMetrics reads "name value" lines of the Prometheus text format;
// comments and labelled samples are skipped.
func parseMetrics(sc *bufio.Scanner) (map[string]float64, error) {
	out := map[string]float64{}
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.Fields(val)[0], 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}
