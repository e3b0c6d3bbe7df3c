// Package peer is the gRPC end of the cluster protocol: Client implements
// owner.Peers (one connection and one batching forwarder per peer, made
// on first use, whose batches travel over one long-lived ForwardStream;
// a peer of an older version gets unary Forwards; replication travels
// over one ReplicateStream, its logs packed for a peer that said it reads
// them), and Server serves the
// Peer service by asking the core
// (owner.Router's Serve methods). Both only translate: every rule of the
// protocol lives in package owner, which knows nothing of the wire.
//
// A forward's receipts travel lean: the Client says it completes them
// (ForwardRequest.lean_receipts), so the Server leaves out the key,
// limit and node name the asker already knows, and the Client reads them
// at all only for a caller that may give its uses back (owner.Call's
// NoReceipts). Peers of an older version send and read them whole.
//
// Errors cross as gRPC codes plus a reason (rpc.ErrorToPB, rpc.ToStatus),
// and come back matching owner's sentinels.
package peer
