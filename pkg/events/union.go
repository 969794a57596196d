package events

import (
	"github.com/vmihailenco/msgpack/v5"
)

// Union holds a union-typed field inside a struct (AcpDurableHistoryEntry's
// event). It encodes as a nested payload in the Marshal format, so the
// variant's name travels with it.
type Union[U Variant] struct {
	V U
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (u Union[U]) EncodeMsgpack(enc *msgpack.Encoder) error {
	var zero U
	if any(u.V) == any(zero) {
		return enc.EncodeNil()
	}
	b, err := Marshal(u.V)
	if err != nil {
		return err
	}
	return enc.Encode(msgpack.RawMessage(b))
}

// DecodeMsgpack implements msgpack.CustomDecoder.
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
	v, err := Unmarshal(raw)
	if err != nil {
		return err
	}
	m, ok := v.(U)
	if !ok {
		return Errorf(CodeInvalidPayload, "%s is not a member of this union", v.VariantName())
	}
	u.V = m
	return nil
}

const msgpackNil = 0xc0
