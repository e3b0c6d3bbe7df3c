package codec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// counting is the codec, counting the messages it handles: a test sees
// that a side really used it.
type counting struct {
	Codec
	n *atomic.Int64
}

func (c counting) Marshal(v any) (mem.BufferSlice, error) {
	c.n.Add(1)
	return c.Codec.Marshal(v)
}

func (c counting) Unmarshal(data mem.BufferSlice, v any) error {
	c.n.Add(1)
	return c.Codec.Unmarshal(data, v)
}

// echo answers Multi and MultiStream with a fixed rich response and
// keeps the requests it got.
type echo struct {
	pb.UnimplementedLimiterServer
	mu   sync.Mutex
	got  []*pb.MultiRequest
	resp *pb.MultiResponse
}

func (e *echo) Multi(_ context.Context, req *pb.MultiRequest) (*pb.MultiResponse, error) {
	e.mu.Lock()
	e.got = append(e.got, req)
	e.mu.Unlock()
	return e.resp, nil
}

func (e *echo) MultiStream(s grpc.BidiStreamingServer[pb.MultiRequest, pb.MultiResponse]) error {
	for {
		req, err := s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		e.mu.Lock()
		e.got = append(e.got, req)
		e.mu.Unlock()
		resp := proto.CloneOf(e.resp)
		resp.Id = req.Id
		if err := s.Send(resp); err != nil {
			return err
		}
	}
}

func sampleRequest() *pb.MultiRequest {
	return &pb.MultiRequest{Id: 9, Calls: []*pb.Call{
		{Entries: []*pb.Entry{
			{Key: []byte("user:1"), Limit: &pb.Limit{Algorithm: pb.Algorithm_SLIDING_LOG, Uses: 100, WindowMs: 1000, Name: "api·µ"}, Cost: 2},
			{Key: []byte{0, 0xff}, Limit: &pb.Limit{Algorithm: pb.Algorithm_FIXED_WINDOW, Uses: 5, WindowMs: 86400000, Calendar: pb.Calendar_CALENDAR_DAY, Zone: "Europe/Paris"}, Debit: true},
		}, TimeoutUs: 250000, WantRelease: true, Hops: 2},
		{Entries: []*pb.Entry{{Key: []byte("k"), Limit: &pb.Limit{Algorithm: pb.Algorithm_TOKEN_BUCKET, Uses: 10, WindowMs: 1000, Burst: 20}}}, Peek: true, Final: true},
	}}
}

func sampleResponse() *pb.MultiResponse {
	return &pb.MultiResponse{
		Results: []*pb.CallResult{
			{Verdict: &pb.Verdict{Allowed: true, Remaining: 97, ResetAtMs: 1_700_000_000_000}, Receipts: []*pb.Receipt{{Key: []byte("user:1"), Limit: &pb.Limit{Uses: 100, WindowMs: 1000}, Cost: 2, Id: 1<<63 + 5, AgeUs: 3, StartAgeUs: -1, AfterAheadUs: 7, Node: "node-2", AtUs: 123456789}}},
			{Error: &pb.Error{Code: uint32(codes.ResourceExhausted), Message: "too many", Field: "entries", Reason: "SHUTTING_DOWN"}},
		},
		Invalidated: [][]byte{[]byte("a"), {}},
	}
}

// serve starts a Limiter server on 127.0.0.1, with the codec or not.
func serve(t *testing.T, withCodec bool, n *atomic.Int64) (*echo, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if withCodec {
		opts = append(opts, grpc.ForceServerCodecV2(counting{n: n}))
	}
	srv := grpc.NewServer(opts...)
	e := &echo{resp: sampleResponse()}
	pb.RegisterLimiterServer(srv, e)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return e, lis.Addr().String()
}

func dial(t *testing.T, addr string, extra ...grpc.DialOption) pb.LimiterClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pb.NewLimiterClient(conn)
}

// A client and a server talk whichever of them has the codec: the wire
// is the standard codec's. Each side that has it is seen to use it.
func TestWireCompatible(t *testing.T) {
	for _, tc := range []struct{ server, client bool }{{true, false}, {false, true}, {true, true}, {false, false}} {
		t.Run(fmt.Sprintf("server-codec=%v/client-codec=%v", tc.server, tc.client), func(t *testing.T) {
			var sn, cn atomic.Int64
			e, addr := serve(t, tc.server, &sn)
			var opts []grpc.DialOption
			if tc.client {
				opts = append(opts, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(counting{n: &cn})))
			}
			cli := dial(t, addr, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			resp, err := cli.Multi(ctx, sampleRequest())
			if err != nil {
				t.Fatalf("Multi: %v", err)
			}
			if !proto.Equal(resp, sampleResponse()) {
				t.Fatalf("Multi answered %v, want %v", resp, sampleResponse())
			}
			st, err := cli.MultiStream(ctx)
			if err != nil {
				t.Fatalf("MultiStream: %v", err)
			}
			for i := range 3 {
				req := sampleRequest()
				req.Id = uint64(100 + i)
				if err := st.Send(req); err != nil {
					t.Fatalf("MultiStream Send %d: %v", i, err)
				}
				got, err := st.Recv()
				if err != nil {
					t.Fatalf("MultiStream Recv %d: %v", i, err)
				}
				want := sampleResponse()
				want.Id = req.Id
				if !proto.Equal(got, want) {
					t.Fatalf("MultiStream answer %d = %v, want %v", i, got, want)
				}
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("MultiStream after CloseSend: %v, want io.EOF", err)
			}

			e.mu.Lock()
			defer e.mu.Unlock()
			if len(e.got) != 4 {
				t.Fatalf("server got %d requests, want 4", len(e.got))
			}
			for i, req := range e.got {
				want := sampleRequest()
				if i > 0 {
					want.Id = uint64(100 + i - 1)
				}
				if !proto.Equal(req, want) {
					t.Fatalf("server got request %d = %v, want %v", i, req, want)
				}
			}
			// 4 requests and 4 responses through each side with the codec.
			if tc.server && sn.Load() != 8 {
				t.Errorf("server codec handled %d messages, want 8", sn.Load())
			}
			if tc.client && cn.Load() != 8 {
				t.Errorf("client codec handled %d messages, want 8", cn.Load())
			}
		})
	}
}

// raw sends and receives frames as they are, to put bad bytes on the
// wire.
type raw struct{}

func (raw) Name() string { return Name }
func (raw) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (raw) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// A malformed frame, or a string that is not UTF-8, is refused by a
// server with the codec as by one without: an error, never a panic, and
// the server goes on serving.
func TestBadFrames(t *testing.T) {
	invalid, err := (&pb.MultiRequest{Calls: []*pb.Call{{Entries: []*pb.Entry{{Key: []byte("k"), Limit: &pb.Limit{Name: "\xc3("}}}}}}).MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	frames := map[string][]byte{
		"truncated length":  {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"field 0":           {0x00, 0x01},
		"truncated varint":  {0x10, 0xff},
		"end group":         {0x0c},
		"nested truncation": {0x0a, 0x04, 0x0a, 0x09, 0x0a, 0x01},
		"invalid UTF-8":     invalid,
	}
	for _, withCodec := range []bool{true, false} {
		var n atomic.Int64
		e, addr := serve(t, withCodec, &n)
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(raw{})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for name, frame := range frames {
			var out []byte
			err := conn.Invoke(ctx, pb.Limiter_Multi_FullMethodName, &frame, &out)
			if status.Code(err) != codes.Internal {
				t.Errorf("server codec=%v, %s frame %x: %v, want an Internal error", withCodec, name, frame, err)
			}
		}
		good, _ := proto.Marshal(sampleRequest())
		var out []byte
		if err := conn.Invoke(ctx, pb.Limiter_Multi_FullMethodName, &good, &out); err != nil {
			t.Fatalf("server codec=%v: a good frame after the bad ones: %v", withCodec, err)
		}
		e.mu.Lock()
		if len(e.got) != 1 {
			t.Errorf("server codec=%v: handler saw %d requests, want only the good one", withCodec, len(e.got))
		}
		e.mu.Unlock()
	}
}

// ServerOption and DialOption install the codec: a call through them
// goes through Codec (its UTF-8 check refuses what a bare connection's
// vtproto code would send).
func TestOptions(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(ServerOption())
	pb.RegisterLimiterServer(srv, &echo{resp: sampleResponse()})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	cli := dial(t, lis.Addr().String(), DialOption())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Multi(ctx, sampleRequest())
	if err != nil || !proto.Equal(resp, sampleResponse()) {
		t.Fatalf("Multi through ServerOption and DialOption = %v, %v", resp, err)
	}
	bad := sampleRequest()
	bad.Calls[0].Entries[0].Limit.Name = "\xff"
	if _, err := cli.Multi(ctx, bad); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "invalid UTF-8") {
		t.Fatalf("Multi with invalid UTF-8 through DialOption: %v, want an Internal marshal error", err)
	}
}
