package events

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"skein.dev/pkg/events/internal/msgpackraw"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"skein.dev/pkg/events/internal/msgpackcheck"
)

// CodecVersion is the "v" of every payload Marshal writes. See the package
// documentation for the format.
const CodecVersion = 1

// Variant is any type that travels on the bus: a member of one of the
// protocol's unions, or one of Skein's log records. VariantName returns its
// stable wire name, which is also the value of HeaderRecord.
type Variant interface {
	VariantName() string
}

// JSON holds JSON text exactly as received: the schema's JsonUtf8. It is
// never re-encoded on its way through Skein, so unknown fields, _meta and key
// order survive. It travels as msgpack bin.
type JSON []byte

// MarshalJSON returns j unchanged, or null when j is empty.
func (j JSON) MarshalJSON() ([]byte, error) {
	if len(j) == 0 {
		return []byte("null"), nil
	}
	return j, nil
}

// UnmarshalJSON keeps a copy of data.
func (j *JSON) UnmarshalJSON(data []byte) error {
	*j = append((*j)[:0], data...)
	return nil
}

var (
	registryMu sync.RWMutex
	registry   = map[string]func() Variant{}
)

// register adds the variant that newV returns to the registry. Called from
// init; a duplicate name is a programming error.
func register(newV func() Variant) {
	name := newV().VariantName()
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("events: variant registered twice: " + name)
	}
	registry[name] = newV
}

// VariantNames returns every registered wire name.
func VariantNames() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	return names
}

// NewVariant returns a new zero value of the named variant, or false.
func NewVariant(name string) (Variant, bool) {
	registryMu.RLock()
	newV, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, false
	}
	return newV(), true
}

type wireValue struct {
	V    int                `msgpack:"v"`
	Type string             `msgpack:"type"`
	Body msgpack.RawMessage `msgpack:"body"`
}

var encPool = sync.Pool{New: func() any {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetCustomStructTag("msgpack")
	// Sorted map keys make Marshal deterministic: equal values, equal bytes.
	enc.SetSortMapKeys(true)
	return &pooledEncoder{buf: &buf, enc: enc}
}}

type pooledEncoder struct {
	buf *bytes.Buffer
	enc *msgpack.Encoder
}

// Marshal encodes v in the versioned union format. A nil v, or a nil
// pointer in v, is an *Error with CodeInternal: it is a bug in the caller,
// and encoding it as an empty body would store a record that says nothing.
func Marshal(v Variant) ([]byte, error) {
	if v == nil {
		return nil, Errorf(CodeInternal, "marshal: nil variant")
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		// VariantName has a value receiver: calling it would panic.
		return nil, Errorf(CodeInternal, "marshal: nil %s", rv.Type())
	}
	name := v.VariantName()
	if n, ok := fastSize(v); ok {
		// A record of a chunk's way: its body is written after the
		// envelope, in the one allocation.
		out, _ := fastBody(appendEnvelope(make([]byte, 0, n+len(name)+16), name), v)
		return out, nil
	}
	pe := encPool.Get().(*pooledEncoder)
	defer pe.free()
	pe.buf.Reset()
	if err := pe.enc.Encode(v); err != nil {
		return nil, fmt.Errorf("marshal %s: %w", name, err)
	}
	body := pe.buf.Bytes()
	out := appendEnvelope(make([]byte, 0, len(body)+len(name)+16), name)
	return append(out, body...), nil
}

// appendEnvelope appends the envelope of a variant named name up to its
// body, written by hand: a fixmap of three entries, the body last.
func appendEnvelope(out []byte, name string) []byte {
	out = append(out, 0x83)
	out = msgpackraw.AppendStr(out, "v")
	out = append(out, byte(CodecVersion)) // positive fixint
	out = msgpackraw.AppendStr(out, "type")
	out = msgpackraw.AppendStr(out, name)
	return msgpackraw.AppendStr(out, "body")
}

// maxPooledBuffer bounds the buffers kept in encPool, so that one large
// prompt does not pin its buffer for the life of the process (the fmt
// package does the same with its printers).
const maxPooledBuffer = 1 << 20

func (pe *pooledEncoder) free() {
	if pe.buf.Cap() > maxPooledBuffer {
		return
	}
	encPool.Put(pe)
}

// Unmarshal decodes a payload written by Marshal into a new value of the
// variant it names. An undecodable payload, an unknown version or an unknown
// variant is an *Error with CodeInvalidPayload.
//
// The payload must be one msgpack value nested at most
// msgpackcheck.MaxDepth deep, checked first: the library decodes
// recursively, and 8 MiB of nested arrays would overflow the stack.
func Unmarshal(data []byte) (Variant, error) {
	return unmarshal(data, nil)
}

// unmarshal is Unmarshal. If member is not nil, it vets the named variant
// before its body is decoded, so that a union field never decodes (and never
// recurses into) a variant that it would then reject.
func unmarshal(data []byte, member func(Variant) error) (Variant, error) {
	if err := msgpackcheck.Check(data); err != nil {
		return nil, Errorf(CodeInvalidPayload, "decode envelope: %v", err)
	}
	w, ok := envelope(data)
	if !ok {
		if err := msgpack.Unmarshal(data, &w); err != nil {
			return nil, Errorf(CodeInvalidPayload, "decode envelope: %v", err)
		}
	}
	if w.V != CodecVersion {
		return nil, Errorf(CodeInvalidPayload, "codec version %d is not %d", w.V, CodecVersion)
	}
	v, ok := NewVariant(w.Type)
	if !ok {
		return nil, Errorf(CodeInvalidPayload, "unknown variant %q", Truncate(w.Type, 80))
	}
	if member != nil {
		if err := member(v); err != nil {
			return nil, err
		}
	}
	if len(w.Body) == 0 {
		return nil, Errorf(CodeInvalidPayload, "%s: missing body", w.Type)
	}
	if fastDecode(w.Body, v) {
		return v, nil
	}
	if err := msgpack.Unmarshal(w.Body, v); err != nil {
		if e, ok := errors.AsType[*Error](err); ok {
			// A nested union already said what is wrong.
			return nil, Errorf(CodeInvalidPayload, "decode %s: %s", w.Type, e.Message)
		}
		return nil, Errorf(CodeInvalidPayload, "decode %s: %v", w.Type, err)
	}
	return v, nil
}

// envelope reads the envelope of a payload laid out exactly as Marshal
// writes it (v, type and body, in that order) without decoding it: the body
// is the rest of data (msgpackcheck.Check found one value), not copied out
// as the general decode does, which cost as much as the body. Any other
// layout is left to the msgpack decoder (ok false).
func envelope(data []byte) (w wireValue, ok bool) {
	const head = "\x83\xa1v"
	if len(data) < len(head)+1 || string(data[:len(head)]) != head || data[len(head)] > 0x7f {
		return w, false
	}
	w.V = int(data[len(head)])
	rest := data[len(head)+1:]
	const typeKey = "\xa4type"
	if len(rest) < len(typeKey)+1 || string(rest[:len(typeKey)]) != typeKey {
		return w, false
	}
	rest = rest[len(typeKey):]
	var n, at int
	switch c := rest[0]; {
	case c >= 0xa0 && c <= 0xbf:
		n, at = int(c&0x1f), 1
	case c == 0xd9 && len(rest) >= 2:
		n, at = int(rest[1]), 2
	case c == 0xda && len(rest) >= 3:
		n, at = int(rest[1])<<8|int(rest[2]), 3
	default:
		return w, false
	}
	if len(rest) < at+n {
		return w, false
	}
	w.Type, rest = string(rest[at:at+n]), rest[at+n:]
	const bodyKey = "\xa4body"
	if len(rest) <= len(bodyKey) || string(rest[:len(bodyKey)]) != bodyKey || rest[len(bodyKey)] == 0xc0 {
		return w, false // a nil body is the decoder's to refuse
	}
	w.Body = rest[len(bodyKey):]
	return w, true
}

// Decode is Unmarshal for a payload that must be a *T: any other variant is
// an *Error with CodeInvalidPayload.
func Decode[T any, PT interface {
	*T
	Variant
}](data []byte) (PT, error) {
	v, err := Unmarshal(data)
	if err != nil {
		return nil, err
	}
	t, ok := v.(PT)
	if !ok {
		var want PT = new(T)
		return nil, Errorf(CodeInvalidPayload, "got %s, want %s", v.VariantName(), want.VariantName())
	}
	return t, nil
}
