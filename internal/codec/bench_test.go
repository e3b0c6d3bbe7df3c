package codec

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/encoding"

	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// benchRequest is a fleet client's batch under load: 12 single-entry
// sliding-log calls (the mean batch at 64 callers), each with its timeout.
func benchRequest() *pb.MultiRequest {
	req := &pb.MultiRequest{Id: 77}
	for i := range 12 {
		req.Calls = append(req.Calls, &pb.Call{
			Entries:   []*pb.Entry{{Key: fmt.Appendf(nil, "user:%d", 1000+i), Limit: &pb.Limit{Algorithm: pb.Algorithm_SLIDING_LOG, Uses: 100, WindowMs: 1000}}},
			TimeoutUs: 250000,
		})
	}
	return req
}

// BenchmarkCodec is a round trip of one batch through a codec, Marshal
// then Unmarshal into a fresh message, as one side of a MultiStream does
// per message: this package's vtproto codec against gRPC's standard one,
// in the same run. Only the ratio means anything on a shared machine.
func BenchmarkCodec(b *testing.B) {
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"vtproto", Codec{}}, {"standard", standard()}} {
		b.Run(c.name, func(b *testing.B) {
			req := benchRequest()
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.codec.Marshal(req)
				if err != nil {
					b.Fatal(err)
				}
				var out pb.MultiRequest
				if err := c.codec.Unmarshal(data, &out); err != nil {
					b.Fatal(err)
				}
				data.Free()
				if len(out.Calls) != len(req.Calls) {
					b.Fatalf("%d calls back, want %d", len(out.Calls), len(req.Calls))
				}
			}
		})
	}
}
