package ringlimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// Over the gRPC client API, Entry.debit records usage after the fact and
// Limit.burst sets a token bucket's capacity; a bad one is InvalidArgument
// naming the field.
func TestGRPCDebitAndBurst(t *testing.T) {
	tc := startCluster(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := pb.NewLimiterClient(dialPlain(t, tc.nodes[0].GRPCAddr()))
	fixed := &pb.Limit{Algorithm: pb.Algorithm_FIXED_WINDOW, Uses: 10, WindowMs: 3_600_000}
	debit := func(cost int64) *pb.Verdict {
		t.Helper()
		resp, err := client.Consume(ctx, &pb.ConsumeRequest{Entries: []*pb.Entry{{Key: []byte("d"), Limit: fixed, Cost: cost, Debit: true}}})
		if err != nil {
			t.Fatalf("debit of %d: %v", cost, err)
		}
		return resp.GetVerdict()
	}
	if v := debit(25); !v.GetAllowed() || v.GetRemaining() != 0 {
		t.Fatalf("a debit of 25 of 10 on a fresh key: %v, want allowed, 0 left", v)
	}
	if v := debit(1); v.GetAllowed() || v.GetRetryAfterUs() <= 0 {
		t.Fatalf("a debit once 25 of 10 were used: %v, want refused with a wait", v)
	}
	tb := &pb.Limit{Algorithm: pb.Algorithm_TOKEN_BUCKET, Uses: 1, WindowMs: 3_600_000, Burst: 4}
	resp, err := client.Consume(ctx, &pb.ConsumeRequest{Entries: []*pb.Entry{{Key: []byte("b"), Limit: tb, Cost: 4}}})
	if err != nil || !resp.GetVerdict().GetAllowed() {
		t.Fatalf("4 of a burst of 4: %v, %v; want allowed", resp, err)
	}
	bad := &pb.Limit{Uses: 1, WindowMs: 1000, Burst: 4}
	_, err = client.Consume(ctx, &pb.ConsumeRequest{Entries: []*pb.Entry{{Key: []byte("x"), Limit: bad}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "entries[0].limit.burst") {
		t.Fatalf("a burst on a sliding log: %v, want InvalidArgument naming entries[0].limit.burst", err)
	}
}
