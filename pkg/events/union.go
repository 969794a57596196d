package events

import (
	"reflect"

	"github.com/vmihailenco/msgpack/v5"
)

// Union holds a union-typed field inside a struct (AcpDurableHistoryEntry's
// event). It encodes as a nested payload in the Marshal format, so the
// variant's name travels with it. A nil V encodes as msgpack nil and decodes
// back to a nil V; a V holding a nil pointer does not encode (see Marshal).
type Union[U Variant] struct {
	V U
}

// Variant returns V as a Variant, for code that handles every Union alike.
func (u Union[U]) Variant() Variant { return u.V }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (u Union[U]) EncodeMsgpack(enc *msgpack.Encoder) error {
	if any(u.V) == nil {
		return enc.EncodeNil()
	}
	b, err := Marshal(u.V)
	if err != nil {
		return err
	}
	return enc.Encode(msgpack.RawMessage(b))
}

// DecodeMsgpack implements msgpack.CustomDecoder. A payload naming a variant
// that is not a member of U is an *Error with CodeInvalidPayload; its body
// is not decoded.
func (u *Union[U]) DecodeMsgpack(dec *msgpack.Decoder) error {
	raw, err := dec.DecodeRaw()
	if err != nil {
		return err
	}
	if len(raw) == 1 && raw[0] == msgpackNil {
		var zero U
		u.V = zero
		return nil
	}
	v, err := unmarshal(raw, func(v Variant) error {
		if _, ok := v.(U); !ok {
			return Errorf(CodeInvalidPayload, "%s is not a member of %s", v.VariantName(), reflect.TypeFor[U]().Name())
		}
		return nil
	})
	if err != nil {
		return err
	}
	u.V = v.(U)
	return nil
}

const msgpackNil = 0xc0
