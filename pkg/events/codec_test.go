package events_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"

	"skein.dev/pkg/events"
)

// errInvalidPayload matches any *events.Error with CodeInvalidPayload.
var errInvalidPayload = &events.Error{Code: events.CodeInvalidPayload}

func TestRoundTripEveryVariant(t *testing.T) {
	for _, name := range variantNames() {
		t.Run("variant="+name, func(t *testing.T) {
			for _, filled := range []bool{false, true} {
				v := newVariant(t, name)
				if filled {
					fillVariant(t, v)
				}
				b, err := events.Marshal(v)
				if err != nil {
					t.Fatalf("Marshal(%s, filled=%v) = %v", name, filled, err)
				}
				got, err := events.Unmarshal(b)
				if err != nil {
					t.Fatalf("Unmarshal(Marshal(%s, filled=%v)) = %v", name, filled, err)
				}
				if diff := cmp.Diff(v, got); diff != "" {
					t.Errorf("Unmarshal(Marshal(%s, filled=%v)) mismatch (-want +got):\n%s", name, filled, diff)
				}
			}
		})
	}
}

// TestFillSetsEveryField guards the round trip test: a field the filler
// leaves zero is a field whose encoding nothing checks.
func TestFillSetsEveryField(t *testing.T) {
	for _, name := range variantNames() {
		v := newVariant(t, name)
		fillVariant(t, v)
		rv := reflect.ValueOf(v).Elem()
		for i := range rv.NumField() {
			if rv.Field(i).IsZero() {
				t.Errorf("fillVariant(%s) left field %s zero", name, rv.Type().Field(i).Name)
			}
		}
	}
}

func TestMarshalWireFormat(t *testing.T) {
	v := &events.AcpPromptRequest{Content: events.JSON(`[{"type":"text","text":"hi"}]`)}
	b, err := events.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := msgpack.Unmarshal(b, &got); err != nil {
		t.Fatalf("msgpack.Unmarshal(Marshal(%v)) = %v", v, err)
	}
	want := map[string]any{
		"v":    int8(events.CodecVersion),
		"type": "AcpPromptRequest",
		// JsonUtf8 travels as bin ([]byte), absent optionals are omitted.
		"body": map[string]any{"content": []byte(`[{"type":"text","text":"hi"}]`)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Marshal(%v) wire form mismatch (-want +got):\n%s", v, diff)
	}
}

// TestJSONVerbatim checks that JsonUtf8 fields come back byte for byte, in
// a top-level field, a list and a nested union, whatever the JSON holds.
func TestJSONVerbatim(t *testing.T) {
	docs := []struct {
		name string
		json string
	}{
		{"key order", `{"z":1,"a":2,"m":{"y":true,"b":null}}`},
		{"whitespace", " {\n\t\"a\" : [ 1 , 2 ]\r\n} "},
		{"unicode", `{"text":"héllo 世界 😀","esc":"\u00e9\ud83d\ude00\u2028","nul":"\u0000"}`},
		{"numbers", `{"n":[1.0,1e3,-0,12345678901234567890123,0.1e-7]}`},
		{"duplicate keys", `{"a":1,"a":2}`},
		{"meta", `{"sessionUpdate":"x","_meta":{"claudeCode":{"toolName":"Bash"}},"unknown":{"deep":[[[]]]}}`},
		{"scalar", `"just a string"`},
		{"empty object", `{}`},
	}
	for _, d := range docs {
		t.Run(d.name, func(t *testing.T) {
			j := events.JSON(d.json)
			values := []events.Variant{
				&events.AcpPromptRequest{Content: j},
				&events.AcpSessionCreatedResponse{ConfigOptions: []events.JSON{j, j}},
				&events.AcpDurableHistoryEntry{Event: events.Union[events.AcpDurableEvent]{V: &events.AcpDurableSessionUpdate{Update: j}}},
			}
			for _, v := range values {
				b, err := events.Marshal(v)
				if err != nil {
					t.Fatalf("Marshal(%s) = %v", v.VariantName(), err)
				}
				got, err := events.Unmarshal(b)
				if err != nil {
					t.Fatalf("Unmarshal(Marshal(%s)) = %v", v.VariantName(), err)
				}
				var jsons []events.JSON
				switch g := got.(type) {
				case *events.AcpPromptRequest:
					jsons = []events.JSON{g.Content}
				case *events.AcpSessionCreatedResponse:
					jsons = g.ConfigOptions
				case *events.AcpDurableHistoryEntry:
					jsons = []events.JSON{g.Event.V.(*events.AcpDurableSessionUpdate).Update}
				}
				for _, g := range jsons {
					if !bytes.Equal(g, j) {
						t.Errorf("JSON through %s = %q, want %q", v.VariantName(), g, j)
					}
				}
			}
		})
	}
}

func TestJSONMarshalJSON(t *testing.T) {
	tests := []struct {
		name string
		in   events.JSON
		want string
	}{
		{"nil", nil, "null"},
		{"empty", events.JSON{}, "null"},
		{"object", events.JSON(`{"b":1, "a":2}`), `{"b":1, "a":2}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.MarshalJSON()
			if err != nil || string(got) != tt.want {
				t.Errorf("JSON(%q).MarshalJSON() = %q, %v; want %q, nil", tt.in, got, err, tt.want)
			}
		})
	}
	var j events.JSON
	in := []byte(`{"x": [1]}`)
	if err := j.UnmarshalJSON(in); err != nil {
		t.Fatal(err)
	}
	in[2] = 'y' // the caller may reuse its buffer
	if string(j) != `{"x": [1]}` {
		t.Errorf("UnmarshalJSON kept %q, want a copy of the input", j)
	}
}

func TestUnmarshalErrors(t *testing.T) {
	good := mustMarshal(t, &events.AcpRespondPermissionRequest{SessionID: "s", RequestID: "r", OptionID: "o"})
	goodBody := rawBody(t, good)
	prompt := mustMarshal(t, &events.AcpPromptRequest{Content: events.JSON(`"x"`)})

	tests := []struct {
		name string
		in   []byte
		want string // a substring of the error, if set
	}{
		{"nil", nil, ""},
		{"empty", []byte{}, ""},
		{"msgpack nil", []byte{0xc0}, ""},
		{"not a map", []byte{0x93, 0x01, 0x02, 0x03}, ""},
		{"garbage", []byte("hello, world"), ""},
		{"reserved code", []byte{0xc1}, ""},
		{"version 0", envelope(t, "v", 0, "type", "AcpRespondPermissionRequest", "body", goodBody), ""},
		{"version 2", envelope(t, "v", 2, "type", "AcpRespondPermissionRequest", "body", goodBody), "codec version 2"},
		{"version is a string", envelope(t, "v", "1", "type", "AcpRespondPermissionRequest", "body", goodBody), ""},
		{"no version", envelope(t, "type", "AcpRespondPermissionRequest", "body", goodBody), ""},
		{"unknown variant", envelope(t, "v", 1, "type", "AcpTeleportRequest", "body", goodBody), `unknown variant "AcpTeleportRequest"`},
		{"empty variant", envelope(t, "v", 1, "type", "", "body", goodBody), ""},
		{"no body", envelope(t, "v", 1, "type", "AcpRespondPermissionRequest"), ""},
		{"body is a string", envelope(t, "v", 1, "type", "AcpRespondPermissionRequest", "body", "hi"), ""},
		{"field of the wrong type", envelope(t, "v", 1, "type", "AcpRespondPermissionRequest", "body", map[string]any{"sessionId": []int{1}}), ""},
		{"trailing bytes", append(slices.Clip(good), 0x01), "1 bytes after the value"},
		{"second value", append(slices.Clip(good), good...), ""},
		{
			"wrong union member",
			envelope(t, "v", 1, "type", "AcpDurableHistoryEntry", "body", map[string]any{
				"sessionId": "s", "sequence": 1, "timestamp": "t", "event": msgpack.RawMessage(prompt),
			}),
			"AcpPromptRequest is not a member of AcpDurableEvent",
		},
		{
			"unknown variant in union",
			envelope(t, "v", 1, "type", "AcpDurableHistoryEntry", "body", map[string]any{
				"event": msgpack.RawMessage(envelope(t, "v", 1, "type", "AcpNope", "body", map[string]any{})),
			}),
			`unknown variant "AcpNope"`,
		},
		{
			"bad version in union",
			envelope(t, "v", 1, "type", "AcpDurableHistoryEntry", "body", map[string]any{
				"event": msgpack.RawMessage(envelope(t, "v", 9, "type", "AcpDurableSessionUpdate", "body", map[string]any{})),
			}),
			"codec version 9",
		},
		{
			// Four billion entries declared in a few bytes.
			"slice length bomb",
			envelope(t, "v", 1, "type", "AcpListAgentsResponse", "body",
				msgpack.RawMessage([]byte{0x81, 0xa6, 'a', 'g', 'e', 'n', 't', 's', 0xdd, 0xff, 0xff, 0xff, 0xff})),
			"declares 4294967295 items",
		},
		{
			"bin length bomb",
			envelope(t, "v", 1, "type", "AcpDeliverAgentOutputRequest", "body",
				msgpack.RawMessage([]byte{0x81, 0xa5, 'c', 'h', 'u', 'n', 'k', 0xc6, 0xff, 0xff, 0xff, 0xff})),
			"truncated",
		},
		{
			// An unknown field holding arrays nested 8 Mi deep. Without
			// the depth check, skipping it overflows the goroutine stack:
			// a fatal error that no recover catches, so this test would
			// kill the test binary.
			"deep nesting",
			envelope(t, "v", 1, "type", "AcpSessionEvent", "body",
				msgpack.RawMessage(append(append([]byte{0x81, 0xa7, 'u', 'n', 'k', 'n', 'o', 'w', 'n'}, bytes.Repeat([]byte{0x91}, 8<<20)...), 0xc0))),
			"nested more than",
		},
	}
	for i := range len(good) {
		tests = append(tests, struct {
			name string
			in   []byte
			want string
		}{fmt.Sprintf("truncated to %d bytes", i), good[:i], ""})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := events.Unmarshal(tt.in)
			if err == nil {
				t.Fatalf("Unmarshal(%x) = %#v, nil; want an error", truncateBytes(tt.in), v)
			}
			checkInvalidPayload(t, "Unmarshal", err)
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Unmarshal error = %q, want it to mention %q", err, tt.want)
			}
		})
	}
}

// TestUnmarshalIgnoresUnknownFields: a field added by a newer writer does
// not break an older reader.
func TestUnmarshalIgnoresUnknownFields(t *testing.T) {
	b := envelope(t, "v", 1, "type", "AcpCancelPromptResponse", "body", map[string]any{
		"status": "cancelled", "futureField": map[string]any{"x": []int{1, 2}},
	})
	got, err := events.Unmarshal(b)
	if err != nil {
		t.Fatalf("Unmarshal = %v", err)
	}
	want := &events.AcpCancelPromptResponse{Status: "cancelled"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Unmarshal mismatch (-want +got):\n%s", diff)
	}
}

func TestDecode(t *testing.T) {
	b := mustMarshal(t, &events.AcpCancelPromptRequest{SessionID: new("s1")})
	got, err := events.Decode[events.AcpCancelPromptRequest](b)
	if err != nil {
		t.Fatalf("Decode[AcpCancelPromptRequest] = %v", err)
	}
	if diff := cmp.Diff(&events.AcpCancelPromptRequest{SessionID: new("s1")}, got); diff != "" {
		t.Errorf("Decode mismatch (-want +got):\n%s", diff)
	}

	wrong, err := events.Decode[events.AcpPromptRequest](b)
	if wrong != nil || err == nil {
		t.Fatalf("Decode[AcpPromptRequest](AcpCancelPromptRequest) = %v, %v; want nil, an error", wrong, err)
	}
	checkInvalidPayload(t, "Decode", err)
	for _, name := range []string{"AcpCancelPromptRequest", "AcpPromptRequest"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("Decode error %q does not name %s", err, name)
		}
	}

	if _, err := events.Decode[events.AcpPromptRequest]([]byte("junk")); err == nil {
		t.Error("Decode(junk) = nil error, want one")
	} else {
		checkInvalidPayload(t, "Decode", err)
	}
}

func TestUnionNil(t *testing.T) {
	t.Run("nil V round trips", func(t *testing.T) {
		v := &events.AcpDurableHistoryEntry{SessionID: "s", Sequence: 3}
		got, err := events.Unmarshal(mustMarshal(t, v))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(v, got); diff != "" {
			t.Errorf("round trip mismatch (-want +got):\n%s", diff)
		}
		if e := got.(*events.AcpDurableHistoryEntry).Event.V; e != nil {
			t.Errorf("Event.V = %#v, want a nil interface", e)
		}
	})
	t.Run("decoding nil clears V", func(t *testing.T) {
		u := events.Union[events.AcpDurableEvent]{V: &events.AcpDurableSessionUpdate{}}
		if err := msgpack.Unmarshal([]byte{0xc0}, &u); err != nil {
			t.Fatal(err)
		}
		if u.V != nil {
			t.Errorf("after decoding nil, V = %#v, want nil", u.V)
		}
	})
	t.Run("typed nil pointer in V", func(t *testing.T) {
		v := &events.AcpDurableHistoryEntry{Event: events.Union[events.AcpDurableEvent]{V: (*events.AcpDurableSessionUpdate)(nil)}}
		b, err := events.Marshal(v)
		if err == nil {
			t.Fatalf("Marshal(entry with typed nil event) = %x, nil; want an error", b)
		}
		if !errors.Is(err, events.ErrInternal) {
			t.Errorf("Marshal(entry with typed nil event) = %v, want CodeInternal", err)
		}
	})
	t.Run("nil variant", func(t *testing.T) {
		for _, v := range []events.Variant{nil, (*events.AcpPromptRequest)(nil)} {
			if _, err := events.Marshal(v); !errors.Is(err, events.ErrInternal) {
				t.Errorf("Marshal(%#v) = %v, want CodeInternal", v, err)
			}
		}
	})
	t.Run("value member", func(t *testing.T) {
		// A value (not a pointer) member encodes; it decodes as a pointer.
		v := &events.AcpDurableHistoryEntry{Event: events.Union[events.AcpDurableEvent]{V: events.AcpDurablePermissionRequest{RequestID: "r"}}}
		got, err := events.Unmarshal(mustMarshal(t, v))
		if err != nil {
			t.Fatal(err)
		}
		want := &events.AcpDurableHistoryEntry{Event: events.Union[events.AcpDurableEvent]{V: &events.AcpDurablePermissionRequest{RequestID: "r"}}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("round trip mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestUnmarshalDoesNotAlias(t *testing.T) {
	b := mustMarshal(t, &events.AcpPromptRequest{Content: events.JSON(`{"a":1}`)})
	v, err := events.Decode[events.AcpPromptRequest](b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0 // a NATS client reuses its read buffers
	}
	if string(v.Content) != `{"a":1}` {
		t.Errorf("Content = %q after the input was overwritten, want a copy", v.Content)
	}
}

// Helpers shared by the codec tests, fuzz targets and benchmarks.

func checkInvalidPayload(t testing.TB, op string, err error) {
	t.Helper()
	if !errors.Is(err, errInvalidPayload) {
		t.Errorf("%s error = %v, want CodeInvalidPayload", op, err)
	}
	if _, ok := err.(*events.Error); !ok {
		t.Errorf("%s error is %T, want *events.Error", op, err)
	}
}

func variantNames() []string {
	names := events.VariantNames()
	slices.Sort(names)
	return names
}

func newVariant(t testing.TB, name string) events.Variant {
	t.Helper()
	v, ok := events.NewVariant(name)
	if !ok {
		t.Fatalf("NewVariant(%q) = false", name)
	}
	return v
}

func mustMarshal(t testing.TB, v events.Variant) []byte {
	t.Helper()
	b, err := events.Marshal(v)
	if err != nil {
		t.Fatalf("Marshal(%s) = %v", v.VariantName(), err)
	}
	return b
}

// rawBody returns the msgpack body of a Marshal payload.
func rawBody(t testing.TB, payload []byte) msgpack.RawMessage {
	t.Helper()
	var w struct {
		Body msgpack.RawMessage `msgpack:"body"`
	}
	if err := msgpack.Unmarshal(payload, &w); err != nil {
		t.Fatal(err)
	}
	return w.Body
}

// envelope encodes a msgpack map of the given key, value pairs in order,
// to build payloads Marshal would never write.
func envelope(t testing.TB, kv ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.EncodeMapLen(len(kv) / 2); err != nil {
		t.Fatal(err)
	}
	for _, x := range kv {
		if err := enc.Encode(x); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func truncateBytes(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// fillVariant sets every field of v, recursively, to a non-zero value
// derived from the field's path: extremes for integers, non-ASCII text,
// JSON with _meta, and a member for every union.
func fillVariant(t testing.TB, v events.Variant) {
	t.Helper()
	rv := reflect.ValueOf(v).Elem()
	fill(t, rv, rv.Type().Name())
}

var (
	jsonType  = reflect.TypeFor[events.JSON]()
	bytesType = reflect.TypeFor[[]byte]()
)

func fill(t testing.TB, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString(path + " é😀")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Uint32:
		v.SetUint(math.MaxUint32)
	case reflect.Uint64:
		v.SetUint(math.MaxUint64)
	case reflect.Int32:
		v.SetInt(math.MinInt32)
	case reflect.Int64:
		v.SetInt(math.MinInt64)
	case reflect.Float64:
		v.SetFloat(-math.MaxFloat64)
	case reflect.Slice:
		switch v.Type() {
		case jsonType:
			v.SetBytes([]byte(`{"path":"` + path + `","n":1.50,"_meta":{"x":[null,true]}}`))
		case bytesType:
			v.SetBytes(append([]byte{0x00, 0xff, '\n'}, path...))
		default:
			s := reflect.MakeSlice(v.Type(), 2, 2)
			for i := range 2 {
				fill(t, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
			}
			v.Set(s)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for i := range 2 {
			k := reflect.New(v.Type().Key()).Elem()
			fill(t, k, fmt.Sprintf("%s.key%d", path, i))
			e := reflect.New(v.Type().Elem()).Elem()
			fill(t, e, fmt.Sprintf("%s.value%d", path, i))
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), path)
		v.Set(p)
	case reflect.Struct:
		if iface, ok := unionInterface(v.Type()); ok {
			m := unionMember(t, iface)
			fill(t, reflect.ValueOf(m).Elem(), path+"."+m.VariantName())
			v.Field(0).Set(reflect.ValueOf(m))
			return
		}
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				fill(t, v.Field(i), path+"."+f.Name)
			}
		}
	default:
		t.Fatalf("fill %s: no filler for %v", path, v.Type())
	}
}

// unionInterface reports whether t is an events.Union[U], and returns U.
func unionInterface(t reflect.Type) (reflect.Type, bool) {
	if t.PkgPath() != pkgPath || !strings.HasPrefix(t.Name(), "Union[") {
		return nil, false
	}
	return t.Field(0).Type, true
}

// unionMember returns a new value of the first registered variant, by
// name, that implements iface.
func unionMember(t testing.TB, iface reflect.Type) events.Variant {
	t.Helper()
	for _, name := range variantNames() {
		v, _ := events.NewVariant(name)
		if reflect.TypeOf(v).Implements(iface) {
			return v
		}
	}
	t.Fatalf("no registered variant implements %v", iface)
	return nil
}
