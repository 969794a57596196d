package events

// An internal test: envelope is unexported, and its oracle is the msgpack
// decoder it stands in for.

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"skein.dev/pkg/events/internal/msgpackcheck"
)

// FuzzEnvelope checks envelope against the general decode: on any payload
// msgpackcheck.Check accepts, an envelope it reads must be the one the msgpack
// decoder reads, and every payload Marshal writes must take its path.
func FuzzEnvelope(f *testing.F) {
	for _, v := range []Variant{
		&AdapterUpdate{Update: JSON(`{"sessionUpdate":"plan"}`)},
		&EphemeralUpdates{SessionID: "s", AfterSequence: 3, Updates: []JSON{JSON(`{}`)}},
		&RunnerPromptRequest{TurnID: string(bytes.Repeat([]byte("t"), 300))},
	} {
		data, err := Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	long, err := msgpack.Marshal(map[string]any{"v": 1, "type": string(bytes.Repeat([]byte("x"), 70000)), "body": 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(long)
	f.Add([]byte("\x83\xa1v\x01\xa4type\xa1X\xa4body"))
	f.Add([]byte("\x83\xa1v\x01\xa4type\xd9\x01X\xa4body\xc0"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if msgpackcheck.Check(data) != nil {
			return
		}
		w, ok := envelope(data)
		if !ok {
			return
		}
		var want wireValue
		if err := msgpack.Unmarshal(data, &want); err != nil {
			t.Fatalf("envelope read %x, the decoder refuses it: %v", data, err)
		}
		if w.V != want.V || w.Type != want.Type || !bytes.Equal(w.Body, want.Body) {
			t.Fatalf("envelope(%x) = %+v, the decoder reads %+v", data, w, want)
		}
	})
}

// TestEnvelopeOfMarshal checks that what Marshal writes takes the fast
// path, including a long variant name.
func TestEnvelopeOfMarshal(t *testing.T) {
	for _, name := range VariantNames() {
		v, _ := NewVariant(name)
		data, err := Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		w, ok := envelope(data)
		if !ok || w.Type != name || w.V != CodecVersion {
			t.Fatalf("envelope(Marshal(%s)) = %+v, %v", name, w, ok)
		}
	}
}
