// Package client is a client of a fleet of ringlimit nodes (ringlimit
// serve, or nodes embedded with ringlimit.Start): a limiter.Store whose
// calls each key's owner decides.
//
// Dial(ctx, addrs...) or DialConfig(ctx, Config) returns a *Client. It
// follows the fleet's ring and sends each call straight to the node that
// owns its first key (one network hop), or with Config.RoundRobin spreads
// calls over the nodes it was given, each forwarding to the owner. Calls
// concurrent on one node go as one batch over a long-lived MultiStream. A
// call that meets an unavailable node is retried on the next one, within
// its deadline. A refusal with a wait is cached (Config.RefusalCacheSize)
// until its wait ends, or until the nodes report that uses of the key came
// back.
//
// Security holds the certificate files (mTLS) and the bearer token;
// Credentials turns them into gRPC dial options for any client of the
// fleet's gRPC API, HTTPTLS into the TLS configuration of a client of its
// HTTP port.
//
// The package imports neither the gossip library the nodes run
// (memberlist) nor their metrics (Prometheus) or Envoy's API: a service
// that only calls a fleet does not build them in. Members are
// member.Member, the type cluster.Member is an alias of. Package
// ringlimit keeps Dial, DialConfig, Client, ClientConfig, ClientStats,
// Security, ClientCredentials and ClientTLS as shorthands for these.
package client
