package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// fakeStream is the part of a server stream the interceptor uses.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context    { return s.ctx }
func (s fakeStream) SetHeader(metadata.MD) error { return nil }

// A Concurrency rule holds a slot while the handler runs, unary or
// stream, and gives it back when the handler returns or panics.
func TestConcurrencyRule(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryConfig{SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	lim, err := grpclimit.New(m, grpclimit.Options{
		Limit:       limiter.Limit{Uses: 1000, Window: time.Minute},
		MetadataKey: "tenant",
		Methods: []grpclimit.Rule{
			grpclimit.Concurrency("/svc.S/Work", 1, time.Minute),
			grpclimit.Concurrency("/svc.S/*", 1, time.Minute),
		},
		Logger: discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("tenant", "acme"))
	unary := lim.Unary()
	call := func(method string, h grpc.UnaryHandler) (err error, panicked bool) {
		defer func() { panicked = recover() != nil }()
		_, err = unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, h)
		return err, false
	}
	// Inside the handler, the slot is held: a second call is refused.
	var inner error
	err, _ = call("/svc.S/Work", func(context.Context, any) (any, error) {
		inner, _ = call("/svc.S/Work", func(context.Context, any) (any, error) { return nil, nil })
		return nil, nil
	})
	if err != nil || status.Code(inner) != codes.ResourceExhausted {
		t.Fatalf("a call while one is in flight: %v (outer %v); want ResourceExhausted", inner, err)
	}
	// After the handler returned, its slot is free.
	if err, _ := call("/svc.S/Work", func(context.Context, any) (any, error) { return nil, nil }); err != nil {
		t.Fatalf("after the call in flight returned: %v", err)
	}
	// A handler that panics gives its slot back too.
	for i := range 3 {
		err, panicked := call("/svc.S/Work", func(context.Context, any) (any, error) { panic("handler failed") })
		if !panicked || err != nil {
			t.Fatalf("panicking call %d: %v, panicked %v; want the panic through, its slot given back", i+1, err, panicked)
		}
	}
	// A stream holds its slot until it ends.
	stream := lim.Stream()
	info := &grpc.StreamServerInfo{FullMethod: "/svc.S/Watch"}
	var during error
	err = stream(nil, fakeStream{ctx: ctx}, info, func(any, grpc.ServerStream) error {
		during = stream(nil, fakeStream{ctx: ctx}, info, func(any, grpc.ServerStream) error { return nil })
		return nil
	})
	if err != nil || status.Code(during) != codes.ResourceExhausted {
		t.Fatalf("a stream while one is open: %v (outer %v); want ResourceExhausted", during, err)
	}
	if err := stream(nil, fakeStream{ctx: ctx}, info, func(any, grpc.ServerStream) error { return nil }); err != nil {
		t.Fatalf("a stream after the open one ended: %v", err)
	}
}
