package codec

import (
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// errInvalidUTF8 is the standard codec's complaint, which vtproto's
// generated code does not make.
var errInvalidUTF8 = errors.New("string field contains invalid UTF-8")

// plan lists the fields of one message type that checkUTF8 reads: the
// strings that must be valid UTF-8 and the messages that may hold some.
type plan struct {
	strings  []protoreflect.FieldDescriptor
	messages []protoreflect.FieldDescriptor
	maps     []protoreflect.FieldDescriptor
}

// plans caches a *plan per protoreflect.MessageDescriptor.
var plans sync.Map

// checkUTF8 reports a string field of m or of a message in it that is not
// valid UTF-8 where proto.Marshal and proto.Unmarshal would refuse it
// (proto3 strings; proto2's are unchecked).
func checkUTF8(m protoreflect.Message) error {
	p := planOf(m.Descriptor())
	for _, fd := range p.strings {
		if fd.IsList() {
			l := m.Get(fd).List()
			for i := range l.Len() {
				if !utf8.ValidString(l.Get(i).String()) {
					return fmt.Errorf("%s: %w", fd.FullName(), errInvalidUTF8)
				}
			}
		} else if !utf8.ValidString(m.Get(fd).String()) {
			return fmt.Errorf("%s: %w", fd.FullName(), errInvalidUTF8)
		}
	}
	for _, fd := range p.messages {
		if fd.IsList() {
			l := m.Get(fd).List()
			for i := range l.Len() {
				if err := checkUTF8(l.Get(i).Message()); err != nil {
					return err
				}
			}
		} else if m.Has(fd) {
			if err := checkUTF8(m.Get(fd).Message()); err != nil {
				return err
			}
		}
	}
	for _, fd := range p.maps {
		if err := checkMap(m.Get(fd).Map(), fd); err != nil {
			return err
		}
	}
	return nil
}

func checkMap(mp protoreflect.Map, fd protoreflect.FieldDescriptor) error {
	kd, vd := fd.MapKey(), fd.MapValue()
	var err error
	mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		switch {
		case kd.Kind() == protoreflect.StringKind && checked(kd) && !utf8.ValidString(k.String()):
			err = fmt.Errorf("%s: %w", fd.FullName(), errInvalidUTF8)
		case vd.Kind() == protoreflect.StringKind && checked(vd) && !utf8.ValidString(v.String()):
			err = fmt.Errorf("%s: %w", fd.FullName(), errInvalidUTF8)
		case vd.Message() != nil:
			err = checkUTF8(v.Message())
		}
		return err == nil
	})
	return err
}

func planOf(md protoreflect.MessageDescriptor) *plan {
	if p, ok := plans.Load(md); ok {
		return p.(*plan)
	}
	p, _ := plans.LoadOrStore(md, buildPlan(md, map[protoreflect.FullName]bool{}))
	return p.(*plan)
}

// buildPlan lists md's checked strings and the message fields whose type
// holds one, at any depth (seen breaks cycles: a message type already
// being examined is assumed to hold one), and every map field.
func buildPlan(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) *plan {
	seen[md.FullName()] = true
	p := &plan{}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			p.maps = append(p.maps, fd)
		case fd.Kind() == protoreflect.StringKind:
			if checked(fd) {
				p.strings = append(p.strings, fd)
			}
		case fd.Message() != nil:
			if holdsStrings(fd.Message(), seen) {
				p.messages = append(p.messages, fd)
			}
		}
	}
	return p
}

func holdsStrings(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return true
	}
	p := buildPlan(md, seen)
	return len(p.strings) > 0 || len(p.messages) > 0
}

// checked reports whether proto's Go runtime validates fd's UTF-8, as
// its internal strs.EnforceUTF8 decides: proto3 strings, and editions'
// with utf8_validation VERIFY.
func checked(fd protoreflect.FieldDescriptor) bool {
	if fd.Syntax() == protoreflect.Editions {
		if e, ok := fd.(interface{ EnforceUTF8() bool }); ok {
			return e.EnforceUTF8()
		}
	}
	return fd.Syntax() == protoreflect.Proto3
}
