package codec

import (
	"math/rand/v2"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// hot are the messages of the decision path and of replication, which
// the property and fuzz tests name first.
var hot = []proto.Message{
	&pb.MultiRequest{}, &pb.MultiResponse{},
	&pb.ForwardRequest{}, &pb.ForwardResponse{},
	&pb.StateRequest{}, &pb.StateResponse{},
	&pb.CounterState{}, &pb.LogUse{},
}

// allMessages returns a new empty message of every type ringlimit.proto
// declares, nested ones included: a message added to the proto is tested
// without naming it here.
func allMessages() []proto.Message {
	var out []proto.Message
	var walk func(protoreflect.MessageDescriptors)
	walk = func(mds protoreflect.MessageDescriptors) {
		for i := range mds.Len() {
			md := mds.Get(i)
			if md.IsMapEntry() {
				continue
			}
			mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
			if err == nil {
				out = append(out, mt.New().Interface())
			}
			walk(md.Messages())
		}
	}
	walk(pb.File_ringlimit_v1_ringlimit_proto.Messages())
	return out
}

// fill sets a random subset of m's fields to random values, nested
// messages to depth 3, and sometimes an unknown field (which both
// codecs keep).
func fill(r *rand.Rand, m protoreflect.Message, depth int) { fillWith(r, m, depth, false) }

// fillWith is fill; with invalid, one string in eight is not UTF-8.
func fillWith(r *rand.Rand, m protoreflect.Message, depth int, invalid bool) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if r.IntN(4) == 0 {
			continue
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range r.IntN(3) {
				k := scalar(r, fd.MapKey(), invalid).MapKey()
				if fd.MapValue().Message() != nil {
					v := mp.NewValue()
					if depth < 3 {
						fillWith(r, v.Message(), depth+1, invalid)
					}
					mp.Set(k, v)
				} else {
					mp.Set(k, scalar(r, fd.MapValue(), invalid))
				}
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range r.IntN(4) {
				if fd.Message() != nil {
					v := l.NewElement()
					if depth < 3 {
						fillWith(r, v.Message(), depth+1, invalid)
					}
					l.Append(v)
				} else {
					l.Append(scalar(r, fd, invalid))
				}
			}
		case fd.Message() != nil:
			if depth < 3 {
				fillWith(r, m.Mutable(fd).Message(), depth+1, invalid)
			}
		default:
			m.Set(fd, scalar(r, fd, invalid))
		}
	}
	if r.IntN(8) == 0 {
		num := protowire.Number(1000 + r.IntN(1000))
		b := protowire.AppendTag(nil, num, protowire.VarintType)
		b = protowire.AppendVarint(b, r.Uint64())
		m.SetUnknown(append(m.GetUnknown(), b...))
	}
}

// scalar is a random value of fd's kind, often an edge (0, -1, the
// extremes), strings valid UTF-8 with multi-byte runes.
func scalar(r *rand.Rand, fd protoreflect.FieldDescriptor, invalid bool) protoreflect.Value {
	i := r.Int64()
	switch r.IntN(5) {
	case 0:
		i = 0
	case 1:
		i = -1
	case 2:
		i = int64(r.IntN(300))
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 1)
	case protoreflect.EnumKind:
		if r.IntN(4) == 0 { // an open enum's unknown value
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(int32(i)))
		}
		vs := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vs.Get(r.IntN(vs.Len())).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(i))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(i)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(i))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(i))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(i) / 7)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(i) / 7)
	case protoreflect.StringKind:
		if invalid && r.IntN(8) == 0 {
			return protoreflect.ValueOfString(randString(r) + "\xff" + randString(r))
		}
		return protoreflect.ValueOfString(randString(r))
	case protoreflect.BytesKind:
		b := make([]byte, r.IntN(40))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		return protoreflect.ValueOfBytes(b)
	}
	panic("fill: unexpected kind " + fd.Kind().String())
}

func randString(r *rand.Rand) string {
	runes := []rune{'a', 'Z', '0', '-', 'é', 'µ', '日', '🙂', 0}
	s := make([]rune, r.IntN(12))
	for j := range s {
		s[j] = runes[r.IntN(len(runes))]
	}
	return string(s)
}
