package acp_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"skein.dev/pkg/acp"
)

// kv is one member as Members reports it: the key as written and the raw
// value.
type kv struct{ Key, Value string }

// members lists obj's members, or returns Members' error.
func members(obj []byte) ([]kv, error) {
	var out []kv
	err := acp.Members(obj, func(k acp.Key, v []byte) error {
		if cap(v) != len(v) {
			return fmt.Errorf("value %q has spare capacity %d", v, cap(v)-len(v))
		}
		out = append(out, kv{string(k), string(v)})
		return nil
	})
	return out, err
}

func TestMembers(t *testing.T) {
	tests := []struct {
		name string
		obj  string
		want []kv // nil with wantErr
		bad  bool
	}{
		{"empty", `{}`, nil, false},
		{"order kept", `{"b":1,"a":[1,{"x":"}"}],"c":"\"}"}`, []kv{{`"b"`, `1`}, {`"a"`, `[1,{"x":"}"}]`}, {`"c"`, `"\"}"`}}, false},
		{"whitespace", " \n{ \"a\" :\t1 , \"b\" : { } }\r\n", []kv{{`"a"`, `1`}, {`"b"`, `{ }`}}, false},
		{"spellings kept", `{"n":1.50e+2,"s":"\u00e9","k\u0065y":null}`, []kv{{`"n"`, `1.50e+2`}, {`"s"`, `"\u00e9"`}, {`"k\u0065y"`, `null`}}, false},
		{"repeated names", `{"a":1,"a":2}`, []kv{{`"a"`, `1`}, {`"a"`, `2`}}, false},
		{"invalid UTF-8 allowed", "{\"a\":\"\xff\"}", []kv{{`"a"`, "\"\xff\""}}, false},
		{"array", `[1]`, nil, true},
		{"null", `null`, nil, true},
		{"string", `"{}"`, nil, true},
		{"empty input", ``, nil, true},
		{"truncated", `{"a":1`, nil, true},
		{"trailing comma", `{"a":1,}`, nil, true},
		{"two values", `{}{}`, nil, true},
		{"trailing garbage", `{"a":1} x`, nil, true},
		{"bad nested", `{"a":[1,]}`, nil, true},
		{"non-string key", `{1:2}`, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := members([]byte(tt.obj))
			if tt.bad {
				if !errors.Is(err, acp.ErrMalformed) {
					t.Fatalf("Members(%q) = %v, want ErrMalformed", tt.obj, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Members(%q) = %v", tt.obj, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Members(%q) (-want +got):\n%s", tt.obj, diff)
			}
		})
	}
}

func TestMembersStops(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	err := acp.Members([]byte(`{"a":1,"b":2,"c":`), func(acp.Key, []byte) error {
		n++
		return stop
	})
	if err != stop || n != 1 {
		t.Errorf("Members with fn failing = %v after %d calls, want fn's error after 1", err, n)
	}
}

func TestKey(t *testing.T) {
	tests := []struct {
		key, name string
	}{
		{`"id"`, "id"},
		{`"\u0069d"`, "id"},
		{`"a\"b"`, `a"b`},
		{"\"\xff\"", "\uFFFD"},
		{`"\ud800"`, "\uFFFD"},
		{`""`, ""},
	}
	for _, tt := range tests {
		k := acp.Key(tt.key)
		if got := k.Name(); got != tt.name {
			t.Errorf("Key(%s).Name() = %q, want %q", tt.key, got, tt.name)
		}
		if !k.Is(tt.name) {
			t.Errorf("Key(%s).Is(%q) = false, want true", tt.key, tt.name)
		}
		if k.Is(tt.name + "x") {
			t.Errorf("Key(%s).Is(%q) = true, want false", tt.key, tt.name+"x")
		}
		if got := k.NameBytes(); string(got) != tt.name {
			t.Errorf("Key(%s).NameBytes() = %q, want %q", tt.key, got, tt.name)
		}
	}
}

func TestMember(t *testing.T) {
	tests := []struct {
		obj, name string
		want      string
		ok, bad   bool
	}{
		{`{"a":1,"b":{"c":2}}`, "b", `{"c":2}`, true, false},
		{`{"a":1}`, "b", ``, false, false},
		{`{"\u0062":true}`, "b", `true`, true, false},
		{`{"B":1}`, "b", ``, false, false},
		{`{"b":1,"b":2}`, "b", ``, false, true},
		{`{"a":1,"a":2,"b":3}`, "b", `3`, true, false},
		{`[{"b":1}]`, "b", ``, false, true},
		{`{"b":1`, "b", ``, false, true},
	}
	for _, tt := range tests {
		got, ok, err := acp.Member([]byte(tt.obj), tt.name)
		if (err != nil) != tt.bad || (err != nil && !errors.Is(err, acp.ErrMalformed)) {
			t.Errorf("Member(%s, %q) error = %v, want error %t (ErrMalformed)", tt.obj, tt.name, err, tt.bad)
			continue
		}
		if string(got) != tt.want || ok != tt.ok {
			t.Errorf("Member(%s, %q) = %s, %t, want %s, %t", tt.obj, tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestElements(t *testing.T) {
	var got []string
	err := acp.Elements([]byte(` [ 1 , "a" ,{"b":[]}, null ] `), func(v []byte) error {
		got = append(got, string(v))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{`1`, `"a"`, `{"b":[]}`, `null`}, got); diff != "" {
		t.Errorf("Elements (-want +got):\n%s", diff)
	}
	for _, bad := range []string{`{}`, `[1,]`, `[1] 2`, `[`, `"x"`} {
		if err := acp.Elements([]byte(bad), func([]byte) error { return nil }); !errors.Is(err, acp.ErrMalformed) {
			t.Errorf("Elements(%s) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestWithoutMember(t *testing.T) {
	tests := []struct {
		name, obj, key, want string
	}{
		{"first", `{"sessionId":"s","toolCall":{},"options":[]}`, "sessionId", `{"toolCall":{},"options":[]}`},
		{"middle", `{"a":1,"sessionId":"s","b":2}`, "sessionId", `{"a":1,"b":2}`},
		{"last", `{"a":1,"b":2,"sessionId":"s"}`, "sessionId", `{"a":1,"b":2}`},
		{"only", `{"sessionId":"s"}`, "sessionId", `{}`},
		{"absent", `{"a":1}`, "sessionId", `{"a":1}`},
		{"empty", `{}`, "a", `{}`},
		{"every repeat", `{"x":1,"a":2,"x":3,"b":4,"x":5}`, "x", `{"a":2,"b":4}`},
		{"trailing run", `{"a":1,"x":2,"x":3}`, "x", `{"a":1}`},
		{"leading run", `{"x":1,"x":2,"a":3}`, "x", `{"a":3}`},
		{"all", `{"x":1,"x":2}`, "x", `{}`},
		{"escaped name", `{"a":1,"\u0078":2}`, "x", `{"a":1}`},
		{"nested untouched", `{"a":{"x":1},"x":2}`, "x", `{"a":{"x":1}}`},
		{"pretty first", "{\n  \"x\": 1,\n  \"a\": 2\n}", "x", "{\n  \"a\": 2\n}"},
		{"pretty last", "{\n  \"a\": 1,\n  \"x\": 2\n}", "x", "{\n  \"a\": 1\n}"},
		{"pretty only", "{ \"x\" : 1 }", "x", "{  }"},
		{"surrounding space", " {\"x\":1,\"a\":2} \n", "x", " {\"a\":2} \n"},
		{"invalid kept", `{"x":1,`, "x", `{"x":1,`},
		{"array kept", `[{"x":1}]`, "x", `[{"x":1}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := acp.WithoutMember([]byte(tt.obj), tt.key); string(got) != tt.want {
				t.Errorf("WithoutMember(%q, %q) = %q, want %q", tt.obj, tt.key, got, tt.want)
			}
		})
	}
}

func TestWithoutMemberDoesNotWriteInput(t *testing.T) {
	in := []byte(`{"a":1,"x":2,"b":3}`)
	orig := string(in)
	out := acp.WithoutMember(in[:len(in):len(in)], "x")
	_ = append(out, "junk"...)
	if string(in) != orig {
		t.Errorf("WithoutMember changed its input to %q", in)
	}
}

func TestWithMember(t *testing.T) {
	tests := []struct {
		name, obj, key, value, want string
	}{
		{"replace", `{"id":"m","currentValue":"a","options":[]}`, "currentValue", `"b"`, `{"id":"m","currentValue":"b","options":[]}`},
		{"replace keeps spacing", "{ \"v\" : 1 , \"w\" : 2 }", "v", `[3, 4]`, "{ \"v\" : [3, 4] , \"w\" : 2 }"},
		{"replace every repeat", `{"v":1,"a":0,"v":2}`, "v", `true`, `{"v":true,"a":0,"v":true}`},
		{"replace escaped name", `{"\u0076":1}`, "v", `2`, `{"\u0076":2}`},
		{"append", `{"id":"m"}`, "currentValue", `"b"`, `{"id":"m","currentValue":"b"}`},
		{"append keeps spacing", "{\n  \"id\": \"m\"\n}", "v", `1`, "{\n  \"id\": \"m\",\"v\":1\n}"},
		{"append to empty", `{}`, "v", `1`, `{"v":1}`},
		{"append to spaced empty", `{ }`, "v", `1`, `{"v":1 }`},
		{"append quotes name", `{}`, `a"b`, `1`, `{"a\"b":1}`},
		{"invalid value", `{"v":1}`, "v", `{`, `{"v":1}`},
		{"empty value", `{"v":1}`, "v", ``, `{"v":1}`},
		{"invalid object", `{"v":1`, "v", `2`, `{"v":1`},
		{"not an object", `[1]`, "v", `2`, `[1]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := acp.WithMember([]byte(tt.obj), tt.key, []byte(tt.value)); string(got) != tt.want {
				t.Errorf("WithMember(%q, %q, %q) = %q, want %q", tt.obj, tt.key, tt.value, got, tt.want)
			}
		})
	}
}

func TestWithMemberLargeObject(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 100 {
		fmt.Fprintf(&b, `"k%d":%d,`, i, i)
	}
	b.WriteString(`"last":0}`)
	got := acp.WithMember([]byte(b.String()), "k50", []byte(`"x"`))
	want := strings.Replace(b.String(), `"k50":50`, `"k50":"x"`, 1)
	if string(got) != want {
		t.Errorf("WithMember(100 members, k50) = %s, want %s", got, want)
	}
}
