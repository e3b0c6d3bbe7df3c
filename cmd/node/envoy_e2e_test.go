package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// writeConfigMap writes files as the kubelet does for a ConfigMap volume:
// into a new timestamped directory, then a "..data_tmp" symlink renamed
// over "..data", then a "key -> ..data/key" symlink per new key, then the
// old directory removed.
func writeConfigMap(t *testing.T, dir, ts string, files map[string]string) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, ts, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		if _, err := os.Lstat(filepath.Join(dir, name)); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// `serve --envoy-config DIR` on a directory laid out as the kubelet mounts
// a ConfigMap: the node starts (it exited 2 before symlinks were
// followed), a ConfigMap update reaches it, --max-descriptors and
// --envoy-response-headers apply, and /metrics has envoy ratelimit's
// statistics.
func TestServeEnvoyConfigMap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	rule := "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: %s}\n"
	writeConfigMap(t, dir, "..2026_12_01_10_00_00.123456789", map[string]string{"edge.yaml": strings.Replace(rule, "%s", "1", 1)})
	p := startProc(t, bin, "envoy-1", "", "--envoy-config", dir, "--envoy-response-headers", "--max-descriptors", "2")
	p.waitReady(t)
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(ips ...string) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req := &rlsv3.RateLimitRequest{Domain: "edge"}
		for _, ip := range ips {
			req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: ip}}})
		}
		return client.ShouldRateLimit(ctx, req)
	}
	r, err := ask("10.0.0.1")
	if err != nil || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 1 {
		t.Fatalf("first call: %v %v; want the 1/minute rule", r, err)
	}
	if h := r.GetResponseHeadersToAdd(); len(h) != 3 || h[0].GetKey() != "RateLimit-Limit" || h[0].GetValue() != "1" || h[1].GetValue() != "0" {
		t.Fatalf("response_headers_to_add %v; want RateLimit-Limit 1, RateLimit-Remaining 0, RateLimit-Reset", h)
	}
	if _, err := ask("a", "b", "c"); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "descriptors") {
		t.Fatalf("3 descriptors past --max-descriptors 2: %v; want ResourceExhausted naming descriptors", err)
	}

	writeConfigMap(t, dir, "..2026_12_01_10_05_00.123456789", map[string]string{"edge.yaml": strings.Replace(rule, "%s", "7", 1)})
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := ask("10.0.0.2")
		if err == nil && r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ConfigMap update never reached the node: last %v %v\n%s", r, err, p.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The new rules answer as soon as they are swapped in; the log line
	// is written after, and reaches the test through the process's pipe.
	for !strings.Contains(p.log.String(), "envoy configuration reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("no reload logged:\n%s", p.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := httpClient.Get("http://" + p.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`ratelimit_service_rate_limit_total_hits_total{domain="edge",key="remote_address"}`,
		`ratelimit_service_config_load_success_total 2`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
