// Package rpc holds ringlimit's wire protocol (package ringlimitv1,
// generated from rpc/proto; `make proto` regenerates it), the conversions
// between the wire types and package limiter, the mapping of errors to
// gRPC status codes (a code plus a reason, never a matched message), the
// batcher that carries every queued call in one RPC, and the client end of
// the long-lived streams (Stream: MultiStream for clients, ForwardStream
// between nodes). Its subpackages are the other wire ends: rpc/peer (the peer
// protocol, owner.Peers over gRPC) and rpc/api (a node's client API).
package rpc
