package rls_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testenv"
	"github.com/ringlimit/ringlimit/rls"
)

// configMap is a directory laid out as the kubelet lays out a ConfigMap
// volume (its AtomicWriter): the files live in a timestamped directory
// "..2026_12_01_10_00_00.123", "..data" links to it, and every key is a
// symlink "edge.yaml -> ..data/edge.yaml".
type configMap struct {
	t       *testing.T
	dir     string
	current string // the timestamped directory ..data points to
	version int
}

func newConfigMap(t *testing.T, files map[string]string) *configMap {
	m := &configMap{t: t, dir: t.TempDir()}
	m.update(files)
	return m
}

// update is a ConfigMap update as the kubelet writes it: a new
// timestamped directory, a "..data_tmp" symlink to it renamed over
// "..data" (the one atomic step), then the keys' symlinks brought in line
// and the old directory removed.
func (m *configMap) update(files map[string]string) {
	t := m.t
	t.Helper()
	m.version++
	ts := "..2026_12_01_10_0" + string(rune('0'+m.version)) + "_00.123456789"
	if err := os.Mkdir(filepath.Join(m.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(m.dir, ts, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(m.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(m.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(m.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	ents, err := os.ReadDir(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, keep := files[e.Name()]; !keep && !strings.HasPrefix(e.Name(), ".") {
			os.Remove(filepath.Join(m.dir, e.Name()))
		}
	}
	if m.current != "" {
		if err := os.RemoveAll(filepath.Join(m.dir, m.current)); err != nil {
			t.Fatal(err)
		}
	}
	m.current = ts
}

const edgeV1 = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"

// The kubelet's layout loads: before symlinks were followed, Load said
// "directory holds no .yaml or .yml file" and every pod of
// deploy/kubernetes.yaml exited 2. (Checked: with Load keeping regular
// files only, as before, this test fails with that message.)
func TestLoadKubeletConfigMap(t *testing.T) {
	m := newConfigMap(t, map[string]string{"edge.yaml": edgeV1, "internal.yml": "domain: internal\n"})
	cfg, err := rls.Load(m.dir)
	if err != nil {
		t.Fatalf("Load(kubelet ConfigMap dir): %v", err)
	}
	var names []string
	for _, d := range cfg.Domains {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, []string{"edge", "internal"}) {
		t.Fatalf("domains %v, want [edge internal] (the ..data and ..TIMESTAMP entries skipped, each key read once)", names)
	}
	if want := filepath.Join(m.dir, "edge.yaml"); cfg.Domains[0].Source != want {
		t.Fatalf("source %q, want %q (the key's own name, not the timestamped one)", cfg.Domains[0].Source, want)
	}
}

// A ConfigMap update (the kubelet swapping ..data) reaches a watching
// service; a bad update is refused and counted, the old rules still
// apply, and the next good one is taken. (Checked: with the watch
// deaf to "..data", v4, an update that adds and removes no key, so
// nothing but ..data changes, is never seen and the poll times out.)
func TestWatchKubeletUpdate(t *testing.T) {
	m := newConfigMap(t, map[string]string{"edge.yaml": edgeV1})
	cfg, err := rls.Load(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxDescriptors = 3 // a setting, kept across reloads
	e := newEnv(t, cfg)
	var logs testenv.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := e.svc.Watch(ctx, slog.New(slog.NewTextHandler(&logs, nil)), m.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	want(t, "v1", e.call("edge", 0, desc("remote_address", "10.0.0.1")).Statuses[0], ok, perUnit(1, minute), 0)

	// v2: the limit goes to 3 per minute and a second file appears.
	m.update(map[string]string{
		"edge.yaml":  strings.Replace(edgeV1, "requests_per_unit: 1", "requests_per_unit: 3", 1),
		"other.yaml": "domain: other\n",
	})
	waitFor(t, "the v2 rules", func() bool { return slices.Equal(e.svc.Domains(), []string{"edge", "other"}) })
	want(t, "v2", e.call("edge", 0, desc("remote_address", "10.0.0.2")).Statuses[0], ok, perUnit(3, minute), 2)
	if _, err := e.try("edge", 0, desc("a", "1"), desc("a", "2"), desc("a", "3"), desc("a", "4")); err == nil {
		t.Fatal("4 descriptors after a reload: no error; MaxDescriptors 3 was lost")
	}

	// v3 is bad: refused, counted, logged; v2 still serves.
	errs := metricValue(t, e.svc, "ratelimit_service_config_load_error_total")
	m.update(map[string]string{"edge.yaml": "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"})
	waitFor(t, "the refusal of v3", func() bool {
		return metricValue(t, e.svc, "ratelimit_service_config_load_error_total") > errs
	})
	if !strings.Contains(logs.String(), "fortnight") {
		t.Fatalf("log %q does not name the bad unit", logs.String())
	}
	want(t, "v2 after a bad v3", e.call("edge", 0, desc("remote_address", "10.0.0.2")).Statuses[0], ok, perUnit(3, minute), 1)

	// v4 is good again.
	m.update(map[string]string{"edge.yaml": strings.Replace(edgeV1, "minute", "hour", 1)})
	waitFor(t, "the v4 rules", func() bool { return slices.Equal(e.svc.Domains(), []string{"edge"}) })
	want(t, "v4", e.call("edge", 0, desc("remote_address", "10.0.0.3")).Statuses[0], ok, perUnit(1, hour), 0)
	stop()
	stop() // idempotent
}

// A watched plain file, replaced by a rename as editors save it.
func TestWatchFileRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(path, []byte(edgeV1), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := rls.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, cfg)
	stop, err := e.svc.Watch(context.Background(), nil, path)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	tmp := filepath.Join(dir, ".edge.yaml.swp")
	if err := os.WriteFile(tmp, []byte(strings.Replace(edgeV1, "domain: edge", "domain: edge2", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the renamed file's rules", func() bool { return slices.Equal(e.svc.Domains(), []string{"edge2"}) })
	if _, err := e.svc.Watch(context.Background(), nil, filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("Watch(missing file): %v, want an error naming it", err)
	}
}

// waitFor polls cond until it holds; it fails the test after a minute
// (a bound for a stuck watch, not a timing expectation).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
