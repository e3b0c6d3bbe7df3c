package ringlimit

import (
	"context"

	"github.com/ringlimit/ringlimit/client"
)

// The fleet client lives in package client, which builds without what a
// node imports (memberlist, Prometheus, Envoy); these are its shorthands.

// Client is a limiter.Store over a fleet of ringlimit nodes: client.Client.
type Client = client.Client

// ClientConfig configures a client of a node fleet: client.Config.
type ClientConfig = client.Config

// ClientStats counts a Client's work since Dial: client.Stats.
type ClientStats = client.Stats

// Dial returns a client of the nodes at addrs (gRPC host:port), plaintext
// and with the default ClientConfig: client.Dial.
func Dial(ctx context.Context, addrs ...string) (*Client, error) {
	return client.Dial(ctx, addrs...)
}

// DialConfig returns a client of a node fleet: client.DialConfig.
func DialConfig(ctx context.Context, cfg ClientConfig) (*Client, error) {
	return client.DialConfig(ctx, cfg)
}
