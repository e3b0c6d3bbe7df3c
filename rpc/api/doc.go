// Package api is the client end of a node, on the wire: the gRPC Limiter
// service (Consume, Peek, Multi, MultiStream, Release, Members, Owner), the
// JSON API over HTTP (POST /v1/consume, /v1/peek; GET /v1/members), and the
// gRPC health service whose watches end when the node stops. It only
// translates: every call goes to the node as a limiter.Store (Node), and
// errors leave as gRPC codes or RFC 9457 problem bodies.
//
// MultiStream is a client's hot path: one long-lived stream per node, each
// batch a message with an id, answered in order; the node also pushes on
// it the keys whose uses were given back (Server.Invalidate), so a client
// drops refusals it cached for them.
package api
