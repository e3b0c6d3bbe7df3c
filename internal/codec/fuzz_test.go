package codec

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// FuzzUnmarshal feeds any bytes to the codec as each hot message: it
// never panics, and what both it and proto.Unmarshal accept decodes to
// equal messages, which it encodes back as proto does.
//
// vtproto's decoder is laxer than proto's on frames no encoder writes: an
// over-long varint (a tenth byte above 1) is read truncated, and a tag
// whose field number is above 2^29-1 is kept as an unknown field; proto
// refuses both. So does it a singular string given twice with invalid
// UTF-8 first, where the codec checks only the value kept (the last).
// Those frames are only checked not to panic. It is stricter in one
// place: a known field with the wrong wire type is an error to it and an
// unknown field to proto.
//
//	go test -run '^$' -fuzz FuzzUnmarshal ./internal/codec
func FuzzUnmarshal(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, zero := range hot {
		for range 8 {
			m := zero.ProtoReflect().New().Interface()
			fill(r, m.ProtoReflect(), 0)
			b, err := proto.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}) // a length past the end
	f.Add([]byte{0x00})                               // field 0
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, zero := range hot {
			got := zero.ProtoReflect().New().Interface()
			if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, got); err != nil {
				continue
			}
			want := zero.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(data, want); err != nil {
				continue // the laxness above
			}
			// The codec keeps an unknown field's bytes as they came; proto
			// re-encodes a tag written in more bytes than it needs. So got
			// is compared with want after a pass through proto.
			vt, err := Codec{}.Marshal(got)
			if err != nil {
				t.Fatalf("%T: Codec.Marshal of what it decoded from %x: %v", zero, data, err)
			}
			norm := zero.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(vt.Materialize(), norm); err != nil {
				t.Fatalf("%T: proto.Unmarshal of Codec.Marshal(Codec.Unmarshal(%x)): %v", zero, data, err)
			}
			if !proto.Equal(norm, want) {
				t.Fatalf("%T: Codec.Unmarshal(%x) = %v, proto.Unmarshal = %v", zero, data, got, want)
			}
			// proto's own encoding of it the codec decodes exactly.
			std, err := proto.Marshal(want)
			if err != nil {
				t.Fatalf("%T: proto.Marshal: %v", zero, err)
			}
			again := zero.ProtoReflect().New().Interface()
			if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(std)}, again); err != nil || !proto.Equal(again, want) {
				t.Fatalf("%T: Codec.Unmarshal(proto.Marshal(%v)) = %v, %v", zero, want, again, err)
			}
		}
	})
}
