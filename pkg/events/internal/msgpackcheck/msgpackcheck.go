// Package msgpackcheck checks untrusted msgpack before the library
// decodes it: events.Unmarshal's first step.
package msgpackcheck

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxDepth bounds how deeply the containers of a payload may nest. The
// deepest payload Skein writes is an AcpHistoryPageResponse: envelope, body,
// events, entry, nested event envelope, its body, six levels. The rest is
// room for fields a newer writer adds. The limit keeps a hostile payload
// from driving the (recursive) decoder into a stack overflow, which no
// recover can catch.
const MaxDepth = 32

var errTruncated = errors.New("msgpack: truncated")

// Check reports whether data is exactly one well-formed msgpack value
// whose containers nest at most MaxDepth deep and never declare more items
// than there are bytes left to hold them (every item takes at least one
// byte). It allocates nothing and does not recurse.
//
// The depth limit is the point: the library's decoder (and its Skip)
// recurse once per level, so deep nesting is a stack overflow. The item
// count check is defence in depth: the library preallocates a slice of the
// declared length before reading the items (decodeSliceValue in v5.4.1 has
// its allocation limit inverted), so decoding a struct straight from
// untrusted bytes could allocate gigabytes for a few bytes of input.
// Unmarshal is safe from that today only because it skips over the body
// (which reads every item) before decoding it.
func Check(data []byte) error {
	// open[d] is the number of items still expected at depth d; depth 0
	// is the top level, which expects exactly one value.
	var open [MaxDepth + 1]uint64
	open[0] = 1
	depth := 0
	i := 0
	for {
		for open[depth] == 0 {
			if depth == 0 {
				if i != len(data) {
					return fmt.Errorf("msgpack: %d bytes after the value", len(data)-i)
				}
				return nil
			}
			depth--
		}
		open[depth]--
		if i >= len(data) {
			return errTruncated
		}
		at := i
		c := data[i]
		i++
		var skip, items uint64 // bytes of payload; items of a container
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0: // positive and negative fixint
		case c <= 0x8f: // fixmap
			items = 2 * uint64(c&0x0f)
		case c <= 0x9f: // fixarray
			items = uint64(c & 0x0f)
		case c <= 0xbf: // fixstr
			skip = uint64(c & 0x1f)
		default:
			switch c {
			case 0xc0, 0xc2, 0xc3: // nil, false, true
			case 0xc4, 0xd9: // bin8, str8
				skip, i, err = readLen(data, i, 1)
			case 0xc5, 0xda: // bin16, str16
				skip, i, err = readLen(data, i, 2)
			case 0xc6, 0xdb: // bin32, str32
				skip, i, err = readLen(data, i, 4)
			case 0xc7: // ext8: length, then type and data
				skip, i, err = readLen(data, i, 1)
				skip++
			case 0xc8: // ext16
				skip, i, err = readLen(data, i, 2)
				skip++
			case 0xc9: // ext32
				skip, i, err = readLen(data, i, 4)
				skip++
			case 0xcc, 0xd0: // uint8, int8
				skip = 1
			case 0xcd, 0xd1: // uint16, int16
				skip = 2
			case 0xca, 0xce, 0xd2: // float32, uint32, int32
				skip = 4
			case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
				skip = 8
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16: type and data
				skip = 1 + 1<<(c-0xd4)
			case 0xdc: // array16
				items, i, err = readLen(data, i, 2)
			case 0xdd: // array32
				items, i, err = readLen(data, i, 4)
			case 0xde: // map16
				items, i, err = readLen(data, i, 2)
				items *= 2
			case 0xdf: // map32
				items, i, err = readLen(data, i, 4)
				items *= 2
			default: // 0xc1 is reserved and never used
				return fmt.Errorf("msgpack: invalid code %#x at offset %d", c, at)
			}
		}
		if err != nil {
			return err
		}
		left := uint64(len(data) - i)
		if skip > left {
			return errTruncated
		}
		i += int(skip)
		if items == 0 {
			continue
		}
		if items > left {
			return fmt.Errorf("msgpack: container at offset %d declares %d items in %d bytes", at, items, left)
		}
		if depth == MaxDepth {
			return fmt.Errorf("msgpack: containers nested more than %d deep", MaxDepth)
		}
		depth++
		open[depth] = items
	}
}

// readLen reads the n-byte big-endian length at data[i:].
func readLen(data []byte, i, n int) (uint64, int, error) {
	if len(data)-i < n {
		return 0, i, errTruncated
	}
	b := data[i : i+n]
	switch n {
	case 1:
		return uint64(b[0]), i + 1, nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), i + 2, nil
	default:
		return uint64(binary.BigEndian.Uint32(b)), i + 4, nil
	}
}
