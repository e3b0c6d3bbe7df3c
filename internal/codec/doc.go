// Package codec is ringlimit's gRPC codec: the protobuf encoding, with the
// marshal and unmarshal code that protoc-gen-go-vtproto generates
// (MarshalToSizedBufferVT, UnmarshalVT, SizeVT in
// rpc/ringlimitv1/ringlimit_vtproto.pb.go) in place of the reflection of
// google.golang.org/protobuf. The bytes on the wire are the same: a peer or
// client with gRPC's standard codec reads and writes them unchanged.
//
// A message without the generated methods (gRPC health, Envoy's rate limit
// service) goes through the standard codec, as does everything if the
// generated code is absent.
//
// The codec is not registered with encoding.RegisterCodecV2: ringlimit runs
// inside its users' processes, whose own gRPC services keep the codec they
// chose. It is installed per server (ServerOption) and per connection
// (DialOption) on ringlimit's own servers and clients.
//
// Its checks are the standard codec's: a proto3 string field that is not
// valid UTF-8 fails to marshal and to unmarshal (vtproto's generated code
// does not check it: the codec calls the CheckUTF8 methods that
// protoc-gen-ringlimit-utf8 generates, or walks a message without them by
// reflection, which cost 8% of a node's CPU when it did it for every
// message), a malformed frame is an error, and unmarshalling resets the
// message first.
package codec
