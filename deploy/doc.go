// Package deploy holds no Go code: it is the folder of the container file
// (Dockerfile) and the Kubernetes manifest (kubernetes.yaml), and of the
// test that keeps them in shape (the manifest's documents decode, the
// probes and flags are wired, the binary builds static). See
// the README (Operating ringlimit).
package deploy
