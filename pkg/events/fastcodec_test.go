package events

// An internal test: fastBody and fastDecode stand in for the msgpack
// library on the records of a chunk's way, and the library is their
// oracle.

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// libraryBody is the body the msgpack library writes for v, as Marshal
// wrote it before fastBody.
func libraryBody(t *testing.T, v Variant) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetCustomStructTag("msgpack")
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fastVariants builds each hand-coded record from the fuzzer's values.
func fastVariants(s, id string, seq uint64, raw []byte, n uint8, shape uint8) []Variant {
	var (
		idp     *string
		update  JSON
		updates []JSON
		kinds   []string
		ids     []*string
	)
	if shape&1 != 0 {
		idp = &id
	}
	if shape&2 != 0 {
		update = JSON(raw)
	}
	if shape&4 != 0 {
		updates = []JSON{}
		for i := range int(n % 20) {
			u := JSON(raw)
			if i%3 == 2 {
				u = nil
			}
			updates = append(updates, u)
			kinds = append(kinds, s)
			if i%2 == 0 {
				ids = append(ids, idp)
			} else {
				ids = append(ids, &s)
			}
		}
	}
	if shape&8 != 0 {
		kinds = nil
	}
	if shape&16 != 0 {
		ids = nil
	}
	return []Variant{
		&AdapterUpdate{Update: update, Kind: s, MessageID: idp},
		&AdapterUpdates{Updates: updates, Kinds: kinds, MessageIDs: ids},
		&AcpEphemeralSessionUpdateEvent{SessionID: s, AfterSequence: seq, Update: update},
		&EphemeralUpdates{SessionID: s, AfterSequence: seq, Updates: updates},
	}
}

// FuzzFastCodec checks that fastBody writes the library's bytes for any
// value of the hand-coded records, and that what fastDecode accepts, of
// any bytes, the library decodes to the same value.
func FuzzFastCodec(f *testing.F) {
	f.Add("s1", "m1", uint64(7), []byte(`{"sessionUpdate":"agent_message_chunk"}`), uint8(3), uint8(0xff), []byte(nil))
	f.Add("", "", uint64(1<<63), bytes.Repeat([]byte("x"), 300), uint8(17), uint8(4), []byte{0x81, 0xa6, 'u', 'p', 'd', 'a', 't', 'e', 0xc4, 0})
	f.Add(string(bytes.Repeat([]byte("k"), 300)), "é", uint64(0), []byte{}, uint8(1), uint8(6), []byte{0x83, 0xa9, 's', 'e', 's', 's', 'i', 'o', 'n', 'I', 'd', 0xc0})
	f.Fuzz(func(t *testing.T, s, id string, seq uint64, raw []byte, n, shape uint8, body []byte) {
		for _, v := range fastVariants(s, id, seq, raw, n, shape) {
			got, ok := fastBody(nil, v)
			if !ok {
				t.Fatalf("fastBody(%T) is not fast", v)
			}
			want := libraryBody(t, v)
			if !bytes.Equal(got, want) {
				t.Fatalf("fastBody(%+v)\n got %x\nwant %x", v, got, want)
			}
			checkFastDecode(t, got, reflect.TypeOf(v).Elem())
			if n, _ := fastSize(v); n < len(want) {
				t.Fatalf("fastSize(%+v) = %d, the body is %d bytes", v, n, len(want))
			}
			out, err := Marshal(v)
			if err != nil || !bytes.Equal(out, append(appendEnvelope(nil, v.VariantName()), want...)) {
				t.Fatalf("Marshal(%+v) = %x, %v; want the envelope and the library's body", v, out, err)
			}
		}
		for _, v := range fastVariants("", "", 0, nil, 0, 0) {
			checkFastDecode(t, body, reflect.TypeOf(v).Elem())
		}
	})
}

// checkFastDecode decodes body as a typ with fastDecode and, when it
// accepts it, with the library, and compares.
func checkFastDecode(t *testing.T, body []byte, typ reflect.Type) {
	t.Helper()
	fast := reflect.New(typ).Interface().(Variant)
	if !fastDecode(body, fast) {
		return
	}
	lib := reflect.New(typ).Interface().(Variant)
	if err := msgpack.Unmarshal(body, lib); err != nil {
		t.Fatalf("fastDecode read %x as %+v; the library refuses it: %v", body, fast, err)
	}
	if !reflect.DeepEqual(fast, lib) {
		t.Fatalf("fastDecode read %x as %#v; the library reads %#v", body, fast, lib)
	}
}

// TestFastCodecLarge checks the 32-bit lengths, too large for the fuzzer
// to grow to: a bin of 64 KiB and more, and a string as long.
func TestFastCodecLarge(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 1<<16+1)
	for _, v := range fastVariants(string(big), string(big), 1, big, 2, 0xff) {
		got, _ := fastBody(nil, v)
		if want := libraryBody(t, v); !bytes.Equal(got, want) {
			t.Fatalf("fastBody(%T) of 64 KiB fields differs from the library's", v)
		}
		checkFastDecode(t, got, reflect.TypeOf(v).Elem())
	}
}
