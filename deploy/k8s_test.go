package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// manifest is kubernetes.yaml decoded strictly into the k8s.io/api types,
// as the API server would read it: an unknown or misspelt field, a
// duplicate key or a value of the wrong type is an error.
type manifest struct {
	sts      *appsv1.StatefulSet
	services map[string]*corev1.Service
	netpol   *networkingv1.NetworkPolicy
	kinds    []string
	objects  []metav1.Object
}

func decodeManifest(t *testing.T) manifest {
	t.Helper()
	data, err := os.ReadFile("kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := manifest{services: map[string]*corev1.Service{}}
	for i, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(data), -1) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if tm.Kind == "" && strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")) == "" {
			continue // comments only
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Service":
			obj = &corev1.Service{}
		case "v1 ConfigMap":
			obj = &corev1.ConfigMap{}
		case "apps/v1 StatefulSet":
			obj = &appsv1.StatefulSet{}
		case "policy/v1 PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "networking.k8s.io/v1 NetworkPolicy":
			obj = &networkingv1.NetworkPolicy{}
		default:
			t.Fatalf("document %d: unexpected %s %s", i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("document %d (%s): strict decode: %v", i, tm.Kind, err)
		}
		m.kinds = append(m.kinds, tm.Kind)
		m.objects = append(m.objects, obj.(metav1.Object))
		switch o := obj.(type) {
		case *corev1.Service:
			m.services[o.Name] = o
		case *appsv1.StatefulSet:
			m.sts = o
		case *networkingv1.NetworkPolicy:
			m.netpol = o
		}
	}
	slices.Sort(m.kinds)
	if m.sts == nil {
		t.Fatal("kubernetes.yaml has no StatefulSet")
	}
	return m
}

func container(t *testing.T, m manifest) *corev1.Container {
	t.Helper()
	if len(m.sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(m.sts.Spec.Template.Spec.Containers))
	}
	return &m.sts.Spec.Template.Spec.Containers[0]
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// flagValue returns the value of --name=VALUE in args.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// Every document decodes strictly into its k8s.io/api type. (Checked by
// hand: a misspelt field, e.g. terminationGracePeriod, fails here while the
// map-based TestManifest still passes.)
func TestManifestStrict(t *testing.T) {
	if got := strings.Join(decodeManifest(t).kinds, " "); got != "ConfigMap NetworkPolicy PodDisruptionBudget Service Service StatefulSet" {
		t.Fatalf("kinds %q", got)
	}
}

// The manifest works in any namespace: no object names one, and the
// --join name takes the pod's own from the downward API. Every $(VAR) in
// the args is an env var of the container (the kubelet leaves an undefined
// one as the literal text).
func TestManifestNamespaceAgnostic(t *testing.T) {
	m := decodeManifest(t)
	for _, o := range m.objects {
		if o.GetNamespace() != "" {
			t.Errorf("%s sets metadata.namespace %q: the manifest is applied with -n", o.GetName(), o.GetNamespace())
		}
	}
	c := container(t, m)
	join, ok := flagValue(c.Args, "join")
	if !ok || join != "ringlimit-peers.$(POD_NAMESPACE).svc.cluster.local:7946" {
		t.Errorf("--join=%q, want the headless Service in the pod's own namespace", join)
	}
	if e := envVar(c, "POD_NAMESPACE"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Error("POD_NAMESPACE is not the pod's namespace (downward API fieldRef metadata.namespace)")
	}
	for _, a := range c.Args {
		for _, v := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(a, -1) {
			if envVar(c, v[1]) == nil {
				t.Errorf("arg %q uses $(%s), which is not an env var of the container", a, v[1])
			}
		}
	}
	if m.sts.Spec.ServiceName != "ringlimit-peers" || m.services["ringlimit-peers"] == nil {
		t.Error("the --join name is not the StatefulSet's headless Service")
	}
	data, _ := os.ReadFile("kubernetes.yaml")
	if strings.Contains(string(data), ".ringlimit.svc") {
		t.Error("kubernetes.yaml still names the namespace ringlimit in a Service DNS name")
	}
}

// goMemLimit parses GOMEMLIMIT as the Go runtime does (an integer with an
// optional B, KiB, MiB, GiB or TiB suffix).
func goMemLimit(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = v, u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("GOMEMLIMIT %q is not a size the Go runtime reads", s)
	}
	return n * mult, nil
}

// GOMEMLIMIT sits about 10% below limits.memory (85 to 95% of it), so the
// Go GC works harder before the kernel OOM-kills the container.
func TestManifestMemoryLimit(t *testing.T) {
	c := container(t, decodeManifest(t))
	e := envVar(c, "GOMEMLIMIT")
	if e == nil || e.Value == "" {
		t.Fatal("GOMEMLIMIT has no literal value (a resourceFieldRef gives the whole limit, no headroom)")
	}
	soft, err := goMemLimit(e.Value)
	if err != nil {
		t.Fatal(err)
	}
	limit := c.Resources.Limits.Memory().Value()
	if limit == 0 {
		t.Fatal("no limits.memory")
	}
	if r := float64(soft) / float64(limit); r < 0.85 || r > 0.95 {
		t.Errorf("GOMEMLIMIT %s is %.1f%% of limits.memory %s, want about 90%% (85..95)", e.Value, 100*r, c.Resources.Limits.Memory())
	}
}

// portNumber resolves a NetworkPolicy port (a number or a container port
// name) to the container's port number.
func portNumber(t *testing.T, c *corev1.Container, p *intstr.IntOrString) int32 {
	t.Helper()
	if p == nil {
		t.Fatal("a NetworkPolicy port without a port opens every port")
	}
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	t.Fatalf("NetworkPolicy port %q is no container port name", p.StrVal)
	return 0
}

// The NetworkPolicy selects the set's pods and admits gossip (7946) only
// from them, and the gRPC port (the peer API) only from them and from
// pods labelled as clients; no rule opens every port, and the HTTP port
// stays reachable for Prometheus and probes.
func TestManifestNetworkPolicy(t *testing.T) {
	m := decodeManifest(t)
	np, c := m.netpol, container(t, m)
	if np == nil {
		t.Fatal("kubernetes.yaml has no NetworkPolicy")
	}
	pods := m.sts.Spec.Template.Labels
	if len(np.Spec.PodSelector.MatchExpressions) != 0 || !maps(np.Spec.PodSelector.MatchLabels, pods) {
		t.Errorf("the NetworkPolicy selects %v, not the set's pods %v", np.Spec.PodSelector.MatchLabels, pods)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Error("the NetworkPolicy does not restrict ingress")
	}
	ownPods := func(p networkingv1.NetworkPolicyPeer) bool {
		return p.IPBlock == nil && p.NamespaceSelector == nil && p.PodSelector != nil &&
			len(p.PodSelector.MatchExpressions) == 0 && maps(p.PodSelector.MatchLabels, pods)
	}
	clients := func(p networkingv1.NetworkPolicyPeer) bool {
		return p.IPBlock == nil && p.PodSelector != nil && p.PodSelector.MatchLabels["ringlimit-client"] == "true"
	}
	admitted := map[string]bool{} // "port/proto" admitted from own pods
	httpOpen := false
	for i, r := range np.Spec.Ingress {
		if len(r.Ports) == 0 {
			t.Errorf("ingress rule %d has no ports: it opens gossip too", i)
			continue
		}
		for _, p := range r.Ports {
			n := portNumber(t, c, p.Port)
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			switch n {
			case 7946:
				if len(r.From) == 0 || !all(r.From, ownPods) {
					t.Errorf("ingress rule %d admits gossip %d/%s from more than the set's own pods: %+v", i, n, proto, r.From)
				}
			case 7947:
				if len(r.From) == 0 || !all(r.From, func(p networkingv1.NetworkPolicyPeer) bool { return ownPods(p) || clients(p) }) {
					t.Errorf("ingress rule %d admits the peer API's port %d from more than the set's pods and labelled clients: %+v", i, n, r.From)
				}
			case 7948:
				httpOpen = httpOpen || len(r.From) == 0
			default:
				t.Errorf("ingress rule %d names port %d, which the node does not serve", i, n)
			}
			if len(r.From) > 0 && all(r.From, ownPods) {
				admitted[fmt.Sprint(n, "/", proto)] = true
			}
		}
	}
	for _, want := range []string{"7946/TCP", "7946/UDP", "7947/TCP"} {
		if !admitted[want] {
			t.Errorf("the set's own pods cannot reach each other on %s", want)
		}
	}
	if !httpOpen {
		t.Error("HTTP (7948: /metrics, probes, JSON API) is not admitted")
	}
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func all[T any](s []T, f func(T) bool) bool {
	for _, v := range s {
		if !f(v) {
			return false
		}
	}
	return true
}

// The peer credential is wired in: --peer-token-file names a file of a
// mounted Secret ringlimit-peer-token (key token, not optional), the
// manifest ships no Secret (no value anyone would deploy as is), and its
// comment says how to create one.
func TestManifestPeerToken(t *testing.T) {
	m := decodeManifest(t)
	c := container(t, m)
	file, ok := flagValue(c.Args, "peer-token-file")
	if !ok {
		if e := envVar(c, "RINGLIMIT_PEER_TOKEN_FILE"); e != nil {
			file, ok = e.Value, true
		}
	}
	if !ok || !path.IsAbs(file) {
		t.Fatalf("no --peer-token-file (or RINGLIMIT_PEER_TOKEN_FILE) with an absolute path: %q", file)
	}
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == path.Dir(file) {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("nothing is mounted at %s", path.Dir(file))
	}
	var vol *corev1.Volume
	for i, v := range m.sts.Spec.Template.Spec.Volumes {
		if v.Name == mount.Name {
			vol = &m.sts.Spec.Template.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != "ringlimit-peer-token" {
		t.Fatalf("%s is not the Secret ringlimit-peer-token: %+v", path.Dir(file), vol)
	}
	if vol.Secret.Optional == nil || *vol.Secret.Optional {
		t.Error("the peer token Secret must not be optional: a node without it would serve the peer API to anyone")
	}
	keyed := slices.ContainsFunc(vol.Secret.Items, func(k corev1.KeyToPath) bool { return k.Key == "token" && k.Path == path.Base(file) })
	if !keyed {
		t.Errorf("the Secret's key token is not mounted as %s: %+v", path.Base(file), vol.Secret.Items)
	}
	if dm := vol.Secret.DefaultMode; dm == nil || (*dm != 0o440 && *dm != 0o400) {
		t.Errorf("the token file's defaultMode is %v, want 0440 (owner and group read, others nothing)", dm)
	}
	// The kubelet writes the file as root: the node (user and group
	// 65532) reads it through the group, which fsGroup sets.
	if g := m.sts.Spec.Template.Spec.SecurityContext.FSGroup; g == nil || *g != 65532 {
		t.Error("the pod has no fsGroup 65532: the node could not read the root-owned token file")
	}
	data, _ := os.ReadFile("kubernetes.yaml")
	if !strings.Contains(string(data), "create secret generic ringlimit-peer-token") || !strings.Contains(string(data), "--from-literal=token=") {
		t.Error("kubernetes.yaml does not say how to create the Secret ringlimit-peer-token")
	}
	if regexp.MustCompile(`(?m)^kind:\s*Secret\s*$`).Match(data) {
		t.Error("kubernetes.yaml ships a Secret: its value would be deployed as is by everyone")
	}
}

// serveFlags builds the real `ringlimit` binary and reads the flags and
// environment variables `ringlimit serve --help` lists ("  --NAME ARG
// (RINGLIMIT_NAME)").
func serveFlags(t *testing.T) (flags, envs map[string]bool) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ringlimit")
	build := exec.Command("go", "build", "-o", bin, "./cmd/node")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/node: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("ringlimit serve --help: %v\n%s", err, out)
	}
	flags, envs = map[string]bool{}, map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  --([a-z0-9-]+)\b.*\((RINGLIMIT_[A-Z0-9_]+)\)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]], envs[m[2]] = true, true
	}
	if len(flags) < 10 || !flags["join"] || !envs["RINGLIMIT_JOIN"] {
		t.Fatalf("found only %d flags in serve --help: the format changed?\n%s", len(flags), out)
	}
	return flags, envs
}

// Every flag the manifest passes is one `ringlimit serve` defines: a
// misspelt or missing flag would crash-loop every pod (exit 2).
func TestManifestFlags(t *testing.T) {
	c := container(t, decodeManifest(t))
	flags, envs := serveFlags(t)
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("args %v do not start with serve", c.Args)
	}
	for _, a := range c.Args[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !flags[name] {
			t.Errorf("arg %q is not a flag of ringlimit serve", a)
		}
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "RINGLIMIT_") && !envs[e.Name] {
			t.Errorf("env %s is not a variable of ringlimit serve", e.Name)
		}
	}
}
