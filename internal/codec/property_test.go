package codec

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// Every message of ringlimit.proto has the generated methods: one without
// them (the vtproto file not regenerated) would silently take the slow
// path.
func TestEveryMessageHasVTCode(t *testing.T) {
	msgs := allMessages()
	if len(msgs) < 40 {
		t.Fatalf("found %d messages in ringlimit.proto, want the 40 or more it declares", len(msgs))
	}
	for _, m := range msgs {
		if _, ok := m.(vtMarshaler); !ok {
			t.Errorf("%T has no MarshalToSizedBufferVT/SizeVT: run make proto", m)
		}
		if _, ok := m.(vtUnmarshaler); !ok {
			t.Errorf("%T has no UnmarshalVT: run make proto", m)
		}
	}
}

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	bs, err := Codec{}.Marshal(m)
	if err != nil {
		t.Fatalf("Codec.Marshal(%T): %v", m, err)
	}
	defer bs.Free()
	return bs.Materialize()
}

// The codec's encoding is proto's, byte for byte, for random messages of
// every type (the hot ones first): what one side marshals the other
// unmarshals into an equal message, both ways.
func TestMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	msgs := append(append([]proto.Message(nil), hot...), allMessages()...)
	for _, zero := range msgs {
		name := string(zero.ProtoReflect().Descriptor().FullName())
		for i := range 300 {
			m := zero.ProtoReflect().New().Interface()
			fill(r, m.ProtoReflect(), 0)

			std, err := proto.Marshal(m)
			if err != nil {
				t.Fatalf("%s #%d: proto.Marshal: %v", name, i, err)
			}
			vt := marshal(t, m)
			if !bytes.Equal(vt, std) {
				t.Fatalf("%s #%d: Codec.Marshal = %x, proto.Marshal = %x (message %v)", name, i, vt, std, m)
			}

			// codec → proto
			got := zero.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(vt, got); err != nil {
				t.Fatalf("%s #%d: proto.Unmarshal of Codec.Marshal: %v", name, i, err)
			}
			if !proto.Equal(got, m) {
				t.Fatalf("%s #%d: proto.Unmarshal(Codec.Marshal(m)) = %v, want %v", name, i, got, m)
			}
			// proto → codec, into a message already holding another value
			// (Unmarshal replaces it, as proto.Unmarshal does).
			got = zero.ProtoReflect().New().Interface()
			fill(r, got.ProtoReflect(), 0)
			if err := (Codec{}).Unmarshal(split(std, r), got); err != nil {
				t.Fatalf("%s #%d: Codec.Unmarshal of proto.Marshal: %v", name, i, err)
			}
			if !proto.Equal(got, m) {
				t.Fatalf("%s #%d: Codec.Unmarshal(proto.Marshal(m)) = %v, want %v", name, i, got, m)
			}
		}
	}
}

// split cuts b into one to three buffers, as a frame may arrive.
func split(b []byte, r *rand.Rand) mem.BufferSlice {
	var bs mem.BufferSlice
	for range r.IntN(3) {
		if len(b) == 0 {
			break
		}
		n := r.IntN(len(b) + 1)
		bs = append(bs, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return append(bs, mem.SliceBuffer(b))
}

// A large message goes through gRPC's buffer pool: still proto's bytes.
func TestLargeMessage(t *testing.T) {
	m := &pb.StateRequest{From: "node-1", RingVersion: 7}
	for i := range 2000 {
		m.States = append(m.States, &pb.CounterState{Key: []byte{byte(i), byte(i >> 8)}, WindowMs: 1000, Log: []*pb.LogUse{{AgeUs: int64(i), Cost: 1, Id: uint64(i)}}})
	}
	std, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if mem.IsBelowBufferPoolingThreshold(len(std)) {
		t.Fatalf("test message is %d bytes, below the pooling threshold", len(std))
	}
	if vt := marshal(t, m); !bytes.Equal(vt, std) {
		t.Fatalf("Codec.Marshal of a %d-byte message differs from proto.Marshal", len(std))
	}
}

// A proto3 string that is not UTF-8 fails both ways, as with proto.
func TestInvalidUTF8(t *testing.T) {
	bad := &pb.MultiRequest{Calls: []*pb.Call{{Entries: []*pb.Entry{{Key: []byte{0xff}, Limit: &pb.Limit{Name: "a\xffb"}}}}}}
	if _, err := proto.Marshal(bad); err == nil {
		t.Fatal("proto.Marshal took invalid UTF-8: the test's premise is wrong")
	}
	if _, err := (Codec{}).Marshal(bad); !errors.Is(err, pb.ErrInvalidUTF8) {
		t.Fatalf("Codec.Marshal of invalid UTF-8 = %v, want ErrInvalidUTF8", err)
	}
	raw, err := bad.MarshalVT() // vtproto does not check
	if err != nil {
		t.Fatal(err)
	}
	if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, &pb.MultiRequest{}); !errors.Is(err, pb.ErrInvalidUTF8) {
		t.Fatalf("Codec.Unmarshal of invalid UTF-8 = %v, want ErrInvalidUTF8", err)
	}
	// bytes fields are not strings: 0xff in a key is fine.
	bad.Calls[0].Entries[0].Limit.Name = "ok"
	if _, err := (Codec{}).Marshal(bad); err != nil {
		t.Fatalf("Codec.Marshal of a non-UTF-8 bytes field: %v", err)
	}
}

// Messages without vtproto code go through the standard codec.
func TestFallback(t *testing.T) {
	m := &fallbackOnly{inner: &pb.Limit{Uses: 5, Name: "x"}}
	if _, ok := any(m).(vtMarshaler); ok {
		t.Fatal("fallbackOnly has vtproto methods")
	}
	bs, err := Codec{}.Marshal(m)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	got := &fallbackOnly{inner: &pb.Limit{}}
	if err := (Codec{}).Unmarshal(bs, got); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if !proto.Equal(got.inner, m.inner) {
		t.Fatalf("round trip through the fallback = %v, want %v", got.inner, m.inner)
	}
	if _, err := (Codec{}).Marshal(struct{}{}); err == nil {
		t.Fatal("Marshal of a non-message: no error")
	}
	if err := (Codec{}).Unmarshal(bs, &struct{}{}); err == nil {
		t.Fatal("Unmarshal into a non-message: no error")
	}
}

// fallbackOnly is a proto.Message (a *pb.Limit's) without the generated
// methods.
type fallbackOnly struct{ inner *pb.Limit }

func (f *fallbackOnly) ProtoReflect() protoreflect.Message { return f.inner.ProtoReflect() }

// The generated CheckUTF8 of every message refuses what proto.Marshal
// refuses, and only that, as the reflection check does: random messages
// with an invalid string here and there.
func TestCheckUTF8MatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, zero := range allMessages() {
		name := zero.ProtoReflect().Descriptor().FullName()
		c, ok := zero.(utf8Checker)
		if !ok {
			t.Errorf("%s has no CheckUTF8: run make proto", name)
			continue
		}
		bad := 0
		for i := range 300 {
			m := zero.ProtoReflect().New().Interface()
			fillWith(r, m.ProtoReflect(), 0, true)
			c = m.(utf8Checker)
			_, stdErr := proto.Marshal(m)
			genErr, reflErr := c.CheckUTF8(), checkUTF8(m.ProtoReflect())
			if (genErr == nil) != (stdErr == nil) || (reflErr == nil) != (stdErr == nil) {
				t.Fatalf("%s #%d: CheckUTF8 = %v, reflection = %v, proto.Marshal = %v (message %v)", name, i, genErr, reflErr, stdErr, m)
			}
			if genErr != nil {
				bad++
				if !errors.Is(genErr, pb.ErrInvalidUTF8) || !errors.Is(reflErr, errInvalidUTF8) {
					t.Fatalf("%s #%d: errors %v, %v are not the sentinels", name, i, genErr, reflErr)
				}
			}
		}
		t.Logf("%s: %d of 300 invalid", name, bad)
	}
}
