package client_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// forbidden are what a node imports and a client must not build in: the
// gossip library, Envoy's API and Prometheus.
var forbidden = []string{"hashicorp/memberlist", "envoyproxy", "prometheus"}

// The client package builds without what only a node needs: go list
// -deps ./client names no package of memberlist, Envoy or Prometheus.
func TestDepsLeaveNodeOut(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is not on PATH: %v", err)
	}
	gomod, err := exec.Command(goTool, "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd := exec.Command(goTool, "list", "-deps", "./client")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./client in %s: %v\n%s", root, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != "github.com/ringlimit/ringlimit/client" {
		t.Fatalf("go list -deps ./client in %s did not list the client package last:\n%s", root, out)
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.Contains(d, f) {
				t.Errorf("package client depends on %s", d)
			}
		}
	}
}
