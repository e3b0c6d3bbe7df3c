package codec

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the standard codec, the fallback
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Name is the codec's name and content-subtype: the standard codec's, so
// that a call carries the same content-type whichever side uses it.
const Name = "proto"

// vtMarshaler is what protoc-gen-go-vtproto's marshal and size features
// generate.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVT(dAtA []byte) (int, error)
}

// vtUnmarshaler is what its unmarshal feature generates. UnmarshalVT
// merges into the message and copies every bytes and string field out of
// the input, so the input buffer may be reused once it returns.
type vtUnmarshaler interface {
	UnmarshalVT(dAtA []byte) error
}

// utf8Checker is what protoc-gen-ringlimit-utf8 generates
// (rpc/ringlimitv1/ringlimit_utf8.pb.go): the UTF-8 check without
// reflection.
type utf8Checker interface {
	CheckUTF8() error
}

// validUTF8 reports a string of m that proto would refuse, by m's
// generated CheckUTF8 or, for a message without one, by reflection.
func validUTF8(m proto.Message) error {
	if c, ok := m.(utf8Checker); ok {
		return c.CheckUTF8()
	}
	return checkUTF8(m.ProtoReflect())
}

// Codec is the encoding.CodecV2. Its zero value is ready; it is safe for
// concurrent use.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// standard is gRPC's protobuf codec, for messages without vtproto code.
func standard() encoding.CodecV2 { return encoding.GetCodecV2(Name) }

// Name implements encoding.CodecV2.
func (Codec) Name() string { return Name }

// Marshal implements encoding.CodecV2.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMarshaler)
	pm, isProto := v.(proto.Message)
	if !ok || !isProto {
		return standard().Marshal(v)
	}
	if err := validUTF8(pm); err != nil {
		return nil, fmt.Errorf("codec: marshal %T: %w", v, err)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(buf); err != nil {
			return nil, fmt.Errorf("codec: marshal %T: %w", v, err)
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, fmt.Errorf("codec: marshal %T: %w", v, err)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal implements encoding.CodecV2. data is only read during the
// call (UnmarshalVT copies what it keeps).
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(vtUnmarshaler)
	pm, isProto := v.(proto.Message)
	if !ok || !isProto {
		return standard().Unmarshal(data, v)
	}
	// proto.Unmarshal replaces the message; UnmarshalVT merges into it.
	proto.Reset(pm)
	var err error
	if len(data) == 1 {
		err = m.UnmarshalVT(data[0].ReadOnlyData())
	} else {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		err = m.UnmarshalVT(buf.ReadOnlyData())
		buf.Free()
	}
	if err == nil {
		err = validUTF8(pm)
	}
	if err != nil {
		return fmt.Errorf("codec: unmarshal %T: %w", v, err)
	}
	return nil
}

// ServerOption installs the codec on one gRPC server, for every message
// it receives and sends.
func ServerOption() grpc.ServerOption { return grpc.ForceServerCodecV2(Codec{}) }

// DialOption installs the codec on one connection, for every call on it.
func DialOption() grpc.DialOption {
	return grpc.WithDefaultCallOptions(grpc.ForceCodecV2(Codec{}))
}
