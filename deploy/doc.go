// Package deploy holds no Go code: it is the folder of the container file
// (Dockerfile), the Kubernetes manifest (kubernetes.yaml), the Grafana
// dashboard (grafana/ringlimit.json) and the Prometheus alerting rules
// (prometheus/rules.yaml, with their promtool unit tests), and of the tests
// that keep them in shape: the manifest decodes strictly into the
// k8s.io/api types (a test-only dependency) and its probes, flags,
// namespace, memory limit, NetworkPolicy and peer-token Secret are wired
// as the node needs; a real node's /metrics passes promtool, and every
// metric the dashboard and the rules name is one it serves; the binary
// builds static. See the README (Operating ringlimit).
package deploy
