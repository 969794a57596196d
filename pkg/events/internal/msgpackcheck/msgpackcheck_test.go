package msgpackcheck

// Check's oracle is the msgpack library itself.

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestCheckMsgpack(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"fixint", []byte{0x01}, true},
		{"nil", []byte{0xc0}, true},
		{"empty map", []byte{0x80}, true},
		{"map", []byte{0x81, 0xa1, 'a', 0x01}, true},
		{"nested arrays at the limit", append(bytes.Repeat([]byte{0x91}, MaxDepth), 0xc0), true},
		{"bin8", []byte{0xc4, 0x02, 0x00, 0xff}, true},
		{"fixext4", []byte{0xd6, 0x01, 0, 0, 0, 0}, true},
		{"ext8", []byte{0xc7, 0x01, 0x05, 0xaa}, true},
		{"float64", []byte{0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, true},
		{"empty", nil, false},
		{"reserved", []byte{0xc1}, false},
		{"trailing byte", []byte{0xc0, 0xc0}, false},
		{"truncated map", []byte{0x81, 0xa1, 'a'}, false},
		{"truncated str", []byte{0xa3, 'a'}, false},
		{"truncated length", []byte{0xc5, 0x01}, false},
		{"truncated uint64", []byte{0xcf, 0, 0}, false},
		{"truncated ext8", []byte{0xc7, 0x01, 0x05}, false},
		{"nested one too deep", append(bytes.Repeat([]byte{0x91}, MaxDepth+1), 0xc0), false},
		{"array32 bomb", []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0}, false},
		{"map32 bomb", []byte{0xdf, 0x80, 0x00, 0x00, 0x00, 0xc0, 0xc0}, false},
		{"bin32 bomb", []byte{0xc6, 0xff, 0xff, 0xff, 0xff}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := Check(tt.in); (err == nil) != tt.ok {
				t.Errorf("Check(%x) = %v, want ok %v", tt.in, err, tt.ok)
			}
		})
	}
}

// FuzzCheckMsgpack: whatever Check accepts, the msgpack library
// reads as exactly one value that spans all of the input. And whatever the
// library reads that way, Check accepts unless it nests too deep or
// its counts are implausible, which the library does not check.
func FuzzCheckMsgpack(f *testing.F) {
	for _, v := range []any{nil, 1, -1, 1.5, "s", []byte{1}, []any{1, "a"}, map[string]any{"a": []int{1}}, []any{[]any{[]any{}}}} {
		b, err := msgpack.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		err := Check(data)
		r := bytes.NewReader(data) // an io.ByteScanner: the decoder reads it unbuffered
		skipErr := msgpack.NewDecoder(r).Skip()
		rest := r.Len()
		libOK := skipErr == nil && rest == 0
		if err == nil && !libOK {
			t.Fatalf("Check(%x) = nil, but the library: %v with %d bytes left", data, skipErr, rest)
		}
		if err != nil && libOK && !strings.Contains(err.Error(), "nested") && !strings.Contains(err.Error(), "declares") {
			t.Fatalf("Check(%x) = %v, but the library reads it", data, err)
		}
	})
}
