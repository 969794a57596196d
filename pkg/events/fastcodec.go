package events

import (
	"bytes"
	"encoding/binary"
)

// The records of a message chunk's way (AdapterUpdate, AdapterUpdates,
// AcpEphemeralSessionUpdateEvent, EphemeralUpdates) are coded by hand, as
// the library writes them (FuzzFastCodec holds it to that): its reflection
// was a sixth of Skein's CPU per chunk at 120 streaming sessions. Any
// other layout, valid or not, is decoded by the library.

// fastSize returns about how many bytes fastBody writes for v (never
// fewer), or false when v is not one of the records encoded by hand.
func fastSize(v Variant) (int, bool) {
	const item = 16 // a header, a key, a length
	switch v := v.(type) {
	case *AdapterUpdate:
		n := 64 + len(v.Update) + len(v.Kind)
		if v.MessageID != nil {
			n += len(*v.MessageID)
		}
		return n, true
	case *AdapterUpdates:
		n := 64
		for _, u := range v.Updates {
			n += item + len(u)
		}
		for _, k := range v.Kinds {
			n += item + len(k)
		}
		for _, id := range v.MessageIDs {
			n += item
			if id != nil {
				n += len(*id)
			}
		}
		return n, true
	case *AcpEphemeralSessionUpdateEvent:
		return 64 + len(v.SessionID) + len(v.Update), true
	case *EphemeralUpdates:
		n := 64 + len(v.SessionID)
		for _, u := range v.Updates {
			n += item + len(u)
		}
		return n, true
	}
	return 0, false
}

// fastBody appends v's msgpack body to b, or returns false when v is not
// one of the records encoded by hand.
func fastBody(b []byte, v Variant) ([]byte, bool) {
	switch v := v.(type) {
	case *AdapterUpdate:
		n := 1 + btoi(v.Kind != "") + btoi(v.MessageID != nil)
		b = append(b, 0x80|byte(n))
		b = appendBin(appendStr(b, "update"), v.Update)
		if v.Kind != "" {
			b = appendString(appendStr(b, "kind"), v.Kind)
		}
		if v.MessageID != nil {
			b = appendString(appendStr(b, "messageId"), *v.MessageID)
		}
	case *AdapterUpdates:
		n := 1 + btoi(len(v.Kinds) > 0) + btoi(len(v.MessageIDs) > 0)
		b = append(b, 0x80|byte(n))
		b = appendStr(b, "updates")
		b = appendArray(b, v.Updates == nil, len(v.Updates))
		for _, u := range v.Updates {
			b = appendBin(b, u)
		}
		if len(v.Kinds) > 0 {
			b = appendArray(appendStr(b, "kinds"), false, len(v.Kinds))
			for _, k := range v.Kinds {
				b = appendString(b, k)
			}
		}
		if len(v.MessageIDs) > 0 {
			b = appendArray(appendStr(b, "messageIds"), false, len(v.MessageIDs))
			for _, id := range v.MessageIDs {
				if id == nil {
					b = append(b, 0xc0)
				} else {
					b = appendString(b, *id)
				}
			}
		}
	case *AcpEphemeralSessionUpdateEvent:
		b = append(b, 0x83)
		b = appendString(appendStr(b, "sessionId"), v.SessionID)
		b = appendUint64(appendStr(b, "afterSequence"), v.AfterSequence)
		b = appendBin(appendStr(b, "update"), v.Update)
	case *EphemeralUpdates:
		b = append(b, 0x83)
		b = appendString(appendStr(b, "sessionId"), v.SessionID)
		b = appendUint64(appendStr(b, "afterSequence"), v.AfterSequence)
		b = appendArray(appendStr(b, "updates"), v.Updates == nil, len(v.Updates))
		for _, u := range v.Updates {
			b = appendBin(b, u)
		}
	default:
		return b, false
	}
	return b, true
}

func btoi(ok bool) int {
	if ok {
		return 1
	}
	return 0
}

// appendString is appendStr for a string of any length.
func appendString(b []byte, s string) []byte {
	if len(s) < 1<<16 {
		return appendStr(b, s)
	}
	b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(len(s)))
	return append(b, s...)
}

func appendBin(b []byte, v []byte) []byte {
	switch n := len(v); {
	case v == nil:
		return append(b, 0xc0)
	case n < 1<<8:
		b = append(b, 0xc4, byte(n))
	case n < 1<<16:
		b = append(b, 0xc5, byte(n>>8), byte(n))
	default:
		b = append(b, 0xc6)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, v...)
}

func appendArray(b []byte, isNil bool, n int) []byte {
	switch {
	case isNil:
		return append(b, 0xc0)
	case n < 16:
		return append(b, 0x90|byte(n))
	case n < 1<<16:
		return append(b, 0xdc, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdd)
		return binary.BigEndian.AppendUint32(b, uint32(n))
	}
}

func appendUint64(b []byte, v uint64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

// fastDecode decodes body into v when v is one of the records decoded by
// hand and body is laid out as fastBody writes it; false leaves v to the
// library.
func fastDecode(body []byte, v Variant) bool {
	switch v.(type) {
	case *AdapterUpdate, *AdapterUpdates, *AcpEphemeralSessionUpdateEvent, *EphemeralUpdates:
	default:
		return false
	}
	// The JSON read is sliced out of one copy of the body, not copied
	// one by one: a burst's updates cost one allocation, and the caller's
	// bytes are not held.
	r := &reader{b: bytes.Clone(body)}
	switch v := v.(type) {
	case *AdapterUpdate:
		var u AdapterUpdate
		for n := r.mapLen(); n > 0 && r.ok(); n-- {
			switch r.str() {
			case "update":
				u.Update = r.bin()
			case "kind":
				u.Kind = r.str()
			case "messageId":
				u.MessageID = r.strPtr()
			default:
				return false
			}
		}
		if !r.done() {
			return false
		}
		*v = u
	case *AdapterUpdates:
		var u AdapterUpdates
		for n := r.mapLen(); n > 0 && r.ok(); n-- {
			switch r.str() {
			case "updates":
				u.Updates = r.bins()
			case "kinds":
				if m, isNil := r.arrayLen(); !isNil {
					u.Kinds = make([]string, 0, min(m, len(r.b)))
					for ; m > 0 && r.ok(); m-- {
						u.Kinds = append(u.Kinds, r.str())
					}
				}
			case "messageIds":
				if m, isNil := r.arrayLen(); !isNil {
					u.MessageIDs = make([]*string, 0, min(m, len(r.b)))
					for ; m > 0 && r.ok(); m-- {
						u.MessageIDs = append(u.MessageIDs, r.strPtr())
					}
				}
			default:
				return false
			}
		}
		if !r.done() {
			return false
		}
		*v = u
	case *AcpEphemeralSessionUpdateEvent:
		var e AcpEphemeralSessionUpdateEvent
		for n := r.mapLen(); n > 0 && r.ok(); n-- {
			switch r.str() {
			case "sessionId":
				e.SessionID = r.str()
			case "afterSequence":
				e.AfterSequence = r.uint64()
			case "update":
				e.Update = r.bin()
			default:
				return false
			}
		}
		if !r.done() {
			return false
		}
		*v = e
	case *EphemeralUpdates:
		var e EphemeralUpdates
		for n := r.mapLen(); n > 0 && r.ok(); n-- {
			switch r.str() {
			case "sessionId":
				e.SessionID = r.str()
			case "afterSequence":
				e.AfterSequence = r.uint64()
			case "updates":
				e.Updates = r.bins()
			default:
				return false
			}
		}
		if !r.done() {
			return false
		}
		*v = e
	default:
		return false
	}
	return true
}

// reader reads the msgpack fastBody writes. The first thing it does not
// expect makes it fail for good (ok false), and every read after returns
// a zero value.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) ok() bool { return !r.bad }

// done reports whether everything was read, and nothing failed.
func (r *reader) done() bool { return !r.bad && len(r.b) == 0 }

func (r *reader) fail() { r.bad, r.b = true, nil }

// take returns the next n bytes.
func (r *reader) take(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.fail()
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

// length reads a big-endian length of size bytes.
func (r *reader) length(size int) int {
	b := r.take(size)
	n := 0
	for _, c := range b {
		n = n<<8 | int(c)
	}
	return n
}

func (r *reader) head() byte {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) mapLen() int {
	c := r.head()
	if c&0xf0 != 0x80 {
		r.fail()
		return 0
	}
	return int(c & 0x0f)
}

// arrayLen reads an array's length, or a nil.
func (r *reader) arrayLen() (n int, isNil bool) {
	switch c := r.head(); {
	case c == 0xc0 && !r.bad:
		return 0, true
	case c&0xf0 == 0x90:
		return int(c & 0x0f), false
	case c == 0xdc:
		return r.length(2), false
	case c == 0xdd:
		return r.length(4), false
	}
	r.fail()
	return 0, false
}

func (r *reader) str() string {
	var n int
	switch c := r.head(); {
	case c&0xe0 == 0xa0:
		n = int(c & 0x1f)
	case c == 0xd9:
		n = r.length(1)
	case c == 0xda:
		n = r.length(2)
	case c == 0xdb:
		n = r.length(4)
	default:
		r.fail()
		return ""
	}
	return string(r.take(n))
}

// strPtr reads a string or a nil.
func (r *reader) strPtr() *string {
	if len(r.b) > 0 && r.b[0] == 0xc0 {
		r.b = r.b[1:]
		return nil
	}
	s := r.str()
	return &s
}

// bin reads bytes, or a nil. They are a slice of the reader's bytes,
// capped so that an append to them copies.
func (r *reader) bin() JSON {
	var n int
	switch c := r.head(); {
	case c == 0xc0 && !r.bad:
		return nil
	case c == 0xc4:
		n = r.length(1)
	case c == 0xc5:
		n = r.length(2)
	case c == 0xc6:
		n = r.length(4)
	default:
		r.fail()
		return nil
	}
	b := r.take(n)
	if b == nil {
		return nil
	}
	return JSON(b)
}

// bins reads an array of bytes, or a nil.
func (r *reader) bins() []JSON {
	m, isNil := r.arrayLen()
	if isNil {
		return nil
	}
	out := make([]JSON, 0, min(m, len(r.b)))
	for ; m > 0 && r.ok(); m-- {
		out = append(out, r.bin())
	}
	return out
}

func (r *reader) uint64() uint64 {
	if r.head() != 0xcf {
		r.fail()
		return 0
	}
	b := r.take(8)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}
