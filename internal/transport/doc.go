// Package transport holds the gRPC transport settings that nodes and fleet
// clients share: TLS configurations loaded from certificate files, the
// bearer token as per-call credentials, and the fixed HTTP/2 windows.
//
// It is a leaf (standard library and grpc only), so that the fleet client
// (package client) gets them without what a node imports (memberlist,
// Prometheus, Envoy). What only a node does with them (server credentials,
// peer authentication, the HTTP port's guards) stays in package ringlimit.
package transport
