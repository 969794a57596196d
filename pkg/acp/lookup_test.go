package acp_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"skein.dev/pkg/acp"
)

func TestLookup(t *testing.T) {
	tests := []struct {
		name      string
		obj       string
		a, b, c   string // a and b at the top, c inside b
		bad       bool
		wantAnyNo string // not JSON: the error must say so
	}{
		{name: "all there", obj: `{"a":1,"b":{"c":"x","d":2},"e":3}`, a: `1`, b: `{"c":"x","d":2}`, c: `"x"`},
		{name: "escaped names", obj: `{"\u0061":1,"b":{"\u0063":[]}}`, a: `1`, b: `{"\u0063":[]}`, c: `[]`},
		{name: "case differs", obj: `{"A":1,"b":{"C":2}}`, b: `{"C":2}`},
		{name: "b not an object", obj: `{"b":[{"c":1}]}`, b: `[{"c":1}]`},
		{name: "whitespace", obj: " {\n \"b\" : { \"c\" : true } } ", b: `{ "c" : true }`, c: `true`},
		{name: "other names repeat", obj: `{"z":1,"z":2,"b":{"y":1,"y":2}}`, b: `{"y":1,"y":2}`},
		{name: "a twice", obj: `{"a":1,"a":2}`, bad: true},
		{name: "c twice", obj: `{"b":{"c":1,"c":2}}`, bad: true},
		{name: "b twice, second an object", obj: `{"b":1,"b":{"c":1}}`, bad: true},
		{name: "repeat then not JSON", obj: `{"a":1,"a":2,"x":}`, bad: true, wantAnyNo: "not valid JSON"},
		{name: "nested repeat then not JSON", obj: `{"b":{"c":1,"c":2},"x"`, bad: true, wantAnyNo: "not valid JSON"},
		{name: "array", obj: `[{"a":1}]`, bad: true},
		{name: "cut short inside b", obj: `{"b":{"c":1`, bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b, c := []byte("stale"), []byte("stale"), []byte("stale")
			err := acp.Lookup([]byte(tt.obj),
				acp.Field{Name: "a", Value: &a},
				acp.Field{Name: "b", Value: &b, Fields: []acp.Field{{Name: "c", Value: &c}}})
			if tt.bad {
				if !errors.Is(err, acp.ErrMalformed) {
					t.Fatalf("Lookup(%s) = %v, want ErrMalformed", tt.obj, err)
				}
				if !strings.Contains(err.Error(), tt.wantAnyNo) {
					t.Fatalf("Lookup(%s) = %v, want it to say %q", tt.obj, err, tt.wantAnyNo)
				}
				return
			}
			if err != nil {
				t.Fatalf("Lookup(%s) = %v", tt.obj, err)
			}
			for _, v := range []struct {
				name      string
				got, want []byte
			}{{"a", a, []byte(tt.a)}, {"b", b, []byte(tt.b)}, {"c", c, []byte(tt.c)}} {
				if string(v.got) != string(v.want) || (len(v.want) == 0) != (v.got == nil) {
					t.Errorf("Lookup(%s): %s = %q, want %q", tt.obj, v.name, v.got, v.want)
				}
				if cap(v.got) != len(v.got) {
					t.Errorf("Lookup(%s): %s has spare capacity", tt.obj, v.name)
				}
			}
		})
	}
}

func TestParseUpdateParams(t *testing.T) {
	id := "m1"
	update := `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"},"messageId":"m1"}`
	sid, got, err := acp.ParseUpdateParams(json.RawMessage(`{"sessionId":"s1","update":` + update + `,"_meta":{}}`))
	if err != nil {
		t.Fatalf("ParseUpdateParams = %v", err)
	}
	want := acp.Update{Kind: acp.UpdateAgentMessageChunk, MessageID: &id, Raw: json.RawMessage(update)}
	if diff := cmp.Diff(want, got); sid != "s1" || diff != "" {
		t.Errorf("ParseUpdateParams = %q, (-want +got):\n%s", sid, diff)
	}

	for name, params := range map[string]string{
		"not JSON":           `{"sessionId":"s","update":{"sessionUpdate":"plan"}`,
		"no sessionId":       `{"update":{"sessionUpdate":"plan"}}`,
		"sessionId null":     `{"sessionId":null,"update":{"sessionUpdate":"plan"}}`,
		"sessionId twice":    `{"sessionId":"a","sessionId":"a","update":{"sessionUpdate":"plan"}}`,
		"no update":          `{"sessionId":"s"}`,
		"update an array":    `{"sessionId":"s","update":[{"sessionUpdate":"plan"}]}`,
		"update twice":       `{"sessionId":"s","update":{"sessionUpdate":"plan"},"update":{"sessionUpdate":"plan"}}`,
		"kind twice":         `{"sessionId":"s","update":{"sessionUpdate":"plan","sessionUpdate":"plan"}}`,
		"kind a number":      `{"sessionId":"s","update":{"sessionUpdate":1}}`,
		"messageId a number": `{"sessionId":"s","update":{"sessionUpdate":"plan","messageId":1}}`,
	} {
		if sid, u, err := acp.ParseUpdateParams(json.RawMessage(params)); !errors.Is(err, acp.ErrMalformed) {
			t.Errorf("%s: ParseUpdateParams(%s) = %q, %+v, %v, want ErrMalformed", name, params, sid, u, err)
		}
	}
}

// FuzzLookup checks a nested Lookup against two Members: the same inputs
// refused, and the same values found, in one pass instead of two.
func FuzzLookup(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s), "a", "b")
	}
	f.Add([]byte(`{"update":{"sessionUpdate":"plan","messageId":null},"sessionId":"s"}`), "update", "sessionUpdate")
	f.Add([]byte(`{"b":{"c":1,"c":2},"x"`), "b", "c")
	f.Fuzz(func(t *testing.T, obj []byte, outer, inner string) {
		var got, gotInner []byte
		err := acp.Lookup(obj, acp.Field{Name: outer, Value: &got, Fields: []acp.Field{{Name: inner, Value: &gotInner}}})

		want, _, wantErr := acp.Member(obj, outer)
		var wantInner []byte
		if wantErr == nil && len(want) > 0 && want[0] == '{' {
			wantInner, _, wantErr = acp.Member(want, inner)
		}
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("Lookup(%q, %q.%q) error = %v, Member says %v", obj, outer, inner, err, wantErr)
		}
		if err != nil {
			if !errors.Is(err, acp.ErrMalformed) {
				t.Fatalf("Lookup(%q) error = %v, want ErrMalformed", obj, err)
			}
			if !json.Valid(obj) && !strings.Contains(err.Error(), "not valid JSON") {
				t.Fatalf("Lookup(%q) error = %v for input that is not JSON, want it to say so", obj, err)
			}
			return
		}
		if string(got) != string(want) || (got == nil) != (want == nil) {
			t.Fatalf("Lookup(%q): %q = %q, Member says %q", obj, outer, got, want)
		}
		if string(gotInner) != string(wantInner) || (gotInner == nil) != (wantInner == nil) {
			t.Fatalf("Lookup(%q): %q.%q = %q, Member says %q", obj, outer, inner, gotInner, wantInner)
		}
	})
}

// FuzzLookupValid checks that LookupValid, which does not validate, finds
// what Lookup finds on valid JSON, and on anything else neither panics
// nor hands out bytes outside its input.
func FuzzLookupValid(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s), "a", "b")
	}
	f.Add([]byte(`{"sessionId":"s","update":{"sessionUpdate":"plan","messageId":null,"content":{"text":"a\\\"}"}}}`), "update", "sessionUpdate")
	f.Add([]byte(` {"x":[{"}":"]"}], "b" : {"c":-1.5e3,"c":true} } `), "b", "c")
	f.Fuzz(func(t *testing.T, obj []byte, outer, inner string) {
		var got, gotInner []byte
		err := acp.LookupValid(obj, acp.Field{Name: outer, Value: &got, Fields: []acp.Field{{Name: inner, Value: &gotInner}}})
		for _, v := range [][]byte{got, gotInner} {
			if v != nil && !within(v, obj) {
				t.Fatalf("LookupValid(%q) handed out %q, not a sub-slice of its input", obj, v)
			}
		}
		if !json.Valid(obj) {
			return
		}
		var want, wantInner []byte
		wantErr := acp.Lookup(obj, acp.Field{Name: outer, Value: &want, Fields: []acp.Field{{Name: inner, Value: &wantInner}}})
		if (err != nil) != (wantErr != nil) || err != nil && !errors.Is(err, acp.ErrMalformed) {
			t.Fatalf("LookupValid(%q, %q.%q) error = %v, Lookup says %v", obj, outer, inner, err, wantErr)
		}
		if err != nil {
			return
		}
		if string(got) != string(want) || (got == nil) != (want == nil) || string(gotInner) != string(wantInner) || (gotInner == nil) != (wantInner == nil) {
			t.Fatalf("LookupValid(%q, %q.%q) = %q, %q; Lookup says %q, %q", obj, outer, inner, got, gotInner, want, wantInner)
		}
		if cap(got) != len(got) || cap(gotInner) != len(gotInner) {
			t.Fatalf("LookupValid(%q) handed out a value with spare capacity", obj)
		}

		sid, u, err := acp.ParseValidUpdateParams(obj)
		wantSID, wantU, wantErr := acp.ParseUpdateParams(obj)
		if (err != nil) != (wantErr != nil) || sid != wantSID || !cmp.Equal(u, wantU) {
			t.Fatalf("ParseValidUpdateParams(%q) = %q, %+v, %v; ParseUpdateParams says %q, %+v, %v", obj, sid, u, err, wantSID, wantU, wantErr)
		}
	})
}

// within reports whether v lies inside s.
func within(v, s []byte) bool {
	if len(v) == 0 {
		return true
	}
	for i := range s {
		if &s[i] == &v[0] {
			return i+len(v) <= len(s)
		}
	}
	return false
}
