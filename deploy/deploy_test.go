package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"gopkg.in/yaml.v3"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// docs decodes every document of the manifest, as kubectl would read them.
func docs(t *testing.T) []map[string]any {
	t.Helper()
	data, err := os.ReadFile("kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("kubernetes.yaml document %d: %v", len(out), err)
		}
		if d != nil {
			out = append(out, d)
		}
	}
}

// at walks a decoded document: strings index maps, ints index lists.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for i, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a map at %v", path, path[:i])
			}
			if v, ok = m[k]; !ok {
				t.Fatalf("%v: no %q", path, k)
			}
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("%v: no item %d", path, k)
			}
			v = l[k]
		}
	}
	return v
}

func byKind(t *testing.T, ds []map[string]any, kind, name string) map[string]any {
	t.Helper()
	for _, d := range ds {
		if d["kind"] == kind && at(t, d, "metadata", "name") == name {
			return d
		}
	}
	t.Fatalf("no %s %q in kubernetes.yaml", kind, name)
	return nil
}

func TestManifest(t *testing.T) {
	ds := docs(t)
	var kinds []string
	for _, d := range ds {
		kinds = append(kinds, d["kind"].(string))
		if d["apiVersion"] == nil || at(t, d, "metadata", "name") == "" {
			t.Errorf("document %v lacks apiVersion or metadata.name", d["kind"])
		}
	}
	slices.Sort(kinds)
	if got := strings.Join(kinds, " "); got != "ConfigMap NetworkPolicy PodDisruptionBudget Service Service StatefulSet" {
		t.Fatalf("kinds %q", got)
	}
	peers := byKind(t, ds, "Service", "ringlimit-peers")
	if at(t, peers, "spec", "clusterIP") != "None" || at(t, peers, "spec", "publishNotReadyAddresses") != true {
		t.Error("ringlimit-peers must be headless and publish not-ready addresses (nodes are ready only after joining)")
	}
	sts := byKind(t, ds, "StatefulSet", "ringlimit")
	if at(t, sts, "spec", "serviceName") != "ringlimit-peers" {
		t.Error("StatefulSet.serviceName is not the headless Service")
	}
	labels := at(t, sts, "spec", "template", "metadata", "labels").(map[string]any)
	for _, d := range []map[string]any{peers, byKind(t, ds, "Service", "ringlimit")} {
		for k, v := range at(t, d, "spec", "selector").(map[string]any) {
			if labels[k] != v {
				t.Errorf("Service %v selects %s=%v, not a pod label", at(t, d, "metadata", "name"), k, v)
			}
		}
	}
	for k, v := range at(t, byKind(t, ds, "PodDisruptionBudget", "ringlimit"), "spec", "selector", "matchLabels").(map[string]any) {
		if labels[k] != v {
			t.Errorf("PodDisruptionBudget selects %s=%v, not a pod label", k, v)
		}
	}
	if at(t, byKind(t, ds, "PodDisruptionBudget", "ringlimit"), "spec", "maxUnavailable") != 1 {
		t.Error("PodDisruptionBudget.maxUnavailable is not 1")
	}
	pod := at(t, sts, "spec", "template", "spec")
	c := at(t, pod, "containers", 0)
	if p := at(t, c, "readinessProbe", "httpGet", "path"); p != "/readyz" {
		t.Errorf("readiness probe path %v, want /readyz", p)
	}
	if p := at(t, c, "livenessProbe", "httpGet", "path"); p != "/healthz" {
		t.Errorf("liveness probe path %v, want /healthz", p)
	}
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		if at(t, c, probe, "httpGet", "port") != "http" {
			t.Errorf("%s does not use the http port", probe)
		}
	}
	ports := map[string]int{}
	for _, p := range at(t, c, "ports").([]any) {
		ports[at(t, p, "name").(string)] = at(t, p, "containerPort").(int)
	}
	if ports["http"] != 7948 || ports["grpc"] != 7947 || ports["gossip-tcp"] != 7946 || ports["gossip-udp"] != 7946 {
		t.Errorf("container ports %v", ports)
	}
	var args []string
	for _, a := range at(t, c, "args").([]any) {
		args = append(args, a.(string))
	}
	// The namespace is the pod's own (see TestManifestNamespaceAgnostic).
	ns := "$(POD_NAMESPACE)"
	for _, want := range []string{
		"serve",
		"--gossip-addr=0.0.0.0:7946", "--advertise-addr=$(POD_IP):7946",
		"--grpc-addr=0.0.0.0:7947", "--grpc-advertise=$(POD_IP):7947",
		"--http-addr=0.0.0.0:7948",
		"--join=ringlimit-peers." + ns + ".svc.cluster.local:7946",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("args lack %q: %v", want, args)
		}
	}
	var envs []string
	for _, e := range at(t, c, "env").([]any) {
		envs = append(envs, at(t, e, "name").(string))
	}
	if !slices.Contains(envs, "POD_IP") || at(t, c, "env", slices.Index(envs, "POD_IP"), "valueFrom", "fieldRef", "fieldPath") != "status.podIP" {
		t.Error("POD_IP is not the pod's IP")
	}
	grace := at(t, pod, "terminationGracePeriodSeconds").(int)
	sleep := at(t, c, "lifecycle", "preStop", "sleep", "seconds").(int)
	if sleep < 1 || grace < sleep+30 {
		t.Errorf("preStop %d s and grace %d s leave less than 30 s for the hand-off", sleep, grace)
	}
	if at(t, pod, "securityContext", "runAsNonRoot") != true || at(t, c, "securityContext", "allowPrivilegeEscalation") != false {
		t.Error("the pod must run as non-root without privilege escalation")
	}
}

func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, want := range []string{
		"FROM golang:1.26 AS build",
		"CGO_ENABLED=0",
		"./cmd/node",
		"FROM gcr.io/distroless/static:nonroot",
		"USER 65532:65532",
		`ENTRYPOINT ["/ringlimit"]`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

// The container's binary builds with CGO_ENABLED=0: no package under
// cmd/node needs cgo, so the Go linker writes a static executable, as
// distroless/static needs. (The full build, checked by hand with
// `CGO_ENABLED=0 go build -trimpath ./cmd/node` and debug/elf, takes
// minutes on a cold cache; go list answers in about a second.)
func TestStaticBuild(t *testing.T) {
	if m, _ := filepath.Glob("../cmd/node/*.go"); len(m) == 0 {
		t.Fatal("cmd/node has no Go files: the container builds ./cmd/node")
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if .CgoFiles}}{{.ImportPath}}{{end}}{{with .Error}}ERROR {{.}}{{end}}", "./cmd/node")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("CGO_ENABLED=0 go list -deps ./cmd/node: %v\n%s", err, out)
	}
}
