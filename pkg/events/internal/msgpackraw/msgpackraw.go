// Package msgpackraw reads and writes the few msgpack forms of the records
// pkg/events encodes by hand (fastcodec.go), without reflection.
package msgpackraw

import "encoding/binary"

// AppendStr appends s, shorter than 64 KiB, as a msgpack string.
func AppendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, 0xd9, byte(n))
	default:
		b = append(b, 0xda, byte(n>>8), byte(n))
	}
	return append(b, s...)
}

// AppendString appends s as a msgpack string of any length.
func AppendString(b []byte, s string) []byte {
	if len(s) < 1<<16 {
		return AppendStr(b, s)
	}
	b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(len(s)))
	return append(b, s...)
}

// AppendBin appends v as msgpack bytes, or a nil.
func AppendBin(b []byte, v []byte) []byte {
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

// AppendArray appends the head of an array of n items, or a nil.
func AppendArray(b []byte, isNil bool, n int) []byte {
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

// AppendUint64 appends v as a msgpack uint64.
func AppendUint64(b []byte, v uint64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

// Reader reads the msgpack the Append functions write. The first thing it does not
// expect makes it fail for good (ok false), and every read after returns
// a zero value.
type Reader struct {
	b   []byte
	bad bool
}

// NewReader reads b, which it keeps.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

func (r *Reader) Ok() bool { return !r.bad }

// Len is how many bytes are left to read.
func (r *Reader) Len() int { return len(r.b) }

// done reports whether everything was read, and nothing failed.
func (r *Reader) Done() bool { return !r.bad && len(r.b) == 0 }

func (r *Reader) Fail() { r.bad, r.b = true, nil }

// take returns the next n bytes.
func (r *Reader) Take(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.Fail()
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

// length reads a big-endian length of size bytes.
func (r *Reader) Length(size int) int {
	b := r.Take(size)
	n := 0
	for _, c := range b {
		n = n<<8 | int(c)
	}
	return n
}

func (r *Reader) Head() byte {
	if b := r.Take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *Reader) MapLen() int {
	c := r.Head()
	if c&0xf0 != 0x80 {
		r.Fail()
		return 0
	}
	return int(c & 0x0f)
}

// arrayLen reads an array's length, or a nil.
func (r *Reader) ArrayLen() (n int, isNil bool) {
	switch c := r.Head(); {
	case c == 0xc0 && !r.bad:
		return 0, true
	case c&0xf0 == 0x90:
		return int(c & 0x0f), false
	case c == 0xdc:
		return r.Length(2), false
	case c == 0xdd:
		return r.Length(4), false
	}
	r.Fail()
	return 0, false
}

func (r *Reader) Str() string {
	var n int
	switch c := r.Head(); {
	case c&0xe0 == 0xa0:
		n = int(c & 0x1f)
	case c == 0xd9:
		n = r.Length(1)
	case c == 0xda:
		n = r.Length(2)
	case c == 0xdb:
		n = r.Length(4)
	default:
		r.Fail()
		return ""
	}
	return string(r.Take(n))
}

// strPtr reads a string or a nil.
func (r *Reader) StrPtr() *string {
	if len(r.b) > 0 && r.b[0] == 0xc0 {
		r.b = r.b[1:]
		return nil
	}
	s := r.Str()
	return &s
}

// bin reads bytes, or a nil. They are a slice of the reader's bytes,
// capped so that an append to them copies.
func (r *Reader) Bin() []byte {
	var n int
	switch c := r.Head(); {
	case c == 0xc0 && !r.bad:
		return nil
	case c == 0xc4:
		n = r.Length(1)
	case c == 0xc5:
		n = r.Length(2)
	case c == 0xc6:
		n = r.Length(4)
	default:
		r.Fail()
		return nil
	}
	b := r.Take(n)
	if b == nil {
		return nil
	}
	return b
}

func (r *Reader) Uint64() uint64 {
	if r.Head() != 0xcf {
		r.Fail()
		return 0
	}
	b := r.Take(8)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}
