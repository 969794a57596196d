package acp_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"testing"

	"skein.dev/pkg/acp"
)

// jsonSeeds are objects worth starting from: real payloads, and the
// corners of the grammar.
var jsonSeeds = []string{
	``, `{}`, `[]`, `null`, `"x"`, `{"a":1}`, ` { } `,
	`{"sessionId":"s","toolCall":{"toolCallId":"t","title":"Edit"},"options":[{"optionId":"a","name":"Allow","kind":"allow_once"}]}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi \"}\" ]"},"_meta":{"x":[1,2,{"y":null}]}}`,
	`{"id":"model","name":"Model","type":"select","currentValue":"a","options":[{"value":"a","name":"A"}]}`,
	`{"a":1,"a":2,"\u0061":3}`,
	"{\n  \"x\": 1.5e+3,\n  \"y\": [true, false, null]\n}\n",
	"{\"k\xff\":\"v\xfe\"}",
	`{"\ud800":1,"a\\b":"\\"}`,
	`{"a":1,}`, `{"a":1}{}`, `{"a"}`, `{"a":[}`,
}

// oracleMembers reads the top-level members of obj with encoding/json:
// decoded names and raw values, in order. ok is false unless obj is one
// valid JSON object.
func oracleMembers(obj []byte) (names []string, values [][]byte, ok bool) {
	if !json.Valid(obj) {
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, false
		}
		names = append(names, t.(string))
		values = append(values, v)
	}
	return names, values, true
}

// FuzzMembers checks Members, Key and Member against encoding/json: the
// same inputs accepted, the same names in the same order, the values
// byte for byte.
func FuzzMembers(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s), "a")
	}
	f.Fuzz(func(t *testing.T, obj []byte, name string) {
		orig := bytes.Clone(obj)
		var keys []acp.Key
		var values [][]byte
		err := acp.Members(obj, func(k acp.Key, v []byte) error {
			keys = append(keys, k)
			values = append(values, v)
			return nil
		})
		wantNames, wantValues, ok := oracleMembers(obj)
		if (err == nil) != ok {
			t.Fatalf("Members(%q) = %v, encoding/json accepts it: %t", obj, err, ok)
		}
		if !bytes.Equal(obj, orig) {
			t.Fatalf("Members changed its input %q to %q", orig, obj)
		}
		if err != nil {
			if !errors.Is(err, acp.ErrMalformed) {
				t.Fatalf("Members(%q) = %v, want ErrMalformed", obj, err)
			}
			return
		}
		if len(keys) != len(wantNames) {
			t.Fatalf("Members(%q) found %d members, encoding/json %d", obj, len(keys), len(wantNames))
		}
		count := 0
		var last []byte
		for i, k := range keys {
			if k.Name() != wantNames[i] || !k.Is(wantNames[i]) {
				t.Fatalf("Members(%q) key %d = %s (Name %q), encoding/json reads %q", obj, i, k, k.Name(), wantNames[i])
			}
			if !bytes.Equal(values[i], wantValues[i]) {
				t.Fatalf("Members(%q) value %d = %q, encoding/json reads %q", obj, i, values[i], wantValues[i])
			}
			if !bytes.Contains(obj, k) || !bytes.Contains(obj, values[i]) {
				t.Fatalf("Members(%q) member %d (%s: %s) is not in the input", obj, i, k, values[i])
			}
			if string(k.NameBytes()) != wantNames[i] {
				t.Fatalf("Members(%q) key %d = %s (NameBytes %q), encoding/json reads %q", obj, i, k, k.NameBytes(), wantNames[i])
			}
			if wantNames[i] == name {
				count++
				last = wantValues[i]
			}
		}

		v, found, err := acp.Member(obj, name)
		switch {
		case count > 1:
			if !errors.Is(err, acp.ErrMalformed) {
				t.Fatalf("Member(%q, %q) = %q, %v with the name %d times, want ErrMalformed", obj, name, v, err, count)
			}
		case err != nil || found != (count == 1) || !bytes.Equal(v, last):
			t.Fatalf("Member(%q, %q) = %q, %t, %v; want %q, %t", obj, name, v, found, err, last, count == 1)
		}
	})
}

// FuzzWithoutMember checks that WithoutMember removes exactly the members
// with that name, keeps every other member's bytes, and keeps the result
// valid JSON.
func FuzzWithoutMember(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s), "a")
		f.Add([]byte(s), "sessionId")
	}
	f.Fuzz(func(t *testing.T, obj []byte, name string) {
		orig := bytes.Clone(obj)
		out := acp.WithoutMember(obj, name)
		if !bytes.Equal(obj, orig) {
			t.Fatalf("WithoutMember changed its input %q to %q", orig, obj)
		}
		before, err := members(obj)
		if err != nil {
			if !bytes.Equal(out, obj) {
				t.Fatalf("WithoutMember(%q, %q) = %q, want the invalid input back", obj, name, out)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("WithoutMember(%q, %q) = %q, not valid JSON", obj, name, out)
		}
		after, err := members(out)
		if err != nil {
			t.Fatalf("WithoutMember(%q, %q) = %q, not an object: %v", obj, name, out, err)
		}
		want := slices.DeleteFunc(slices.Clone(before), func(m kv) bool { return acp.Key(m.Key).Is(name) })
		if !slices.Equal(after, want) {
			t.Fatalf("WithoutMember(%q, %q) = %q: members %q, want %q", obj, name, out, after, want)
		}
		if len(want) == len(before) && !bytes.Equal(out, obj) {
			t.Fatalf("WithoutMember(%q, %q) = %q, want the input unchanged", obj, name, out)
		}
		if !isSubsequence(out, obj) {
			t.Fatalf("WithoutMember(%q, %q) = %q, which adds bytes", obj, name, out)
		}
	})
}

// FuzzWithMember checks that WithMember sets exactly the members with
// that name (or appends one), keeps every other member's bytes, and keeps
// the result valid JSON.
func FuzzWithMember(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s), "a", []byte(`"v"`))
		f.Add([]byte(s), "currentValue", []byte(` {"x":[1]} `))
	}
	f.Add([]byte(`{}`), "a\xff\"\n", []byte(`1`))
	f.Add([]byte(`{"a":1}`), "a", []byte(`1 2`))
	f.Fuzz(func(t *testing.T, obj []byte, name string, value []byte) {
		orig, origValue := bytes.Clone(obj), bytes.Clone(value)
		out := acp.WithMember(obj, name, value)
		if !bytes.Equal(obj, orig) || !bytes.Equal(value, origValue) {
			t.Fatalf("WithMember changed its input %q, %q to %q, %q", orig, origValue, obj, value)
		}
		before, err := members(obj)
		if err != nil || !json.Valid(value) {
			if !bytes.Equal(out, obj) {
				t.Fatalf("WithMember(%q, %q, %q) = %q, want the input back", obj, name, value, out)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("WithMember(%q, %q, %q) = %q, not valid JSON", obj, name, value, out)
		}
		after, err := members(out)
		if err != nil {
			t.Fatalf("WithMember(%q, %q, %q) = %q, not an object: %v", obj, name, value, out, err)
		}
		want := slices.Clone(before)
		found := false
		for i, m := range want {
			if acp.Key(m.Key).Is(name) {
				want[i].Value = string(bytes.TrimSpace(value))
				found = true
			}
		}
		if !found {
			// The appended member: compare its decoded name.
			if len(after) != len(before)+1 {
				t.Fatalf("WithMember(%q, %q, %q) = %q: %d members, want %d", obj, name, value, out, len(after), len(before)+1)
			}
			added := after[len(after)-1]
			if got := acp.Key(added.Key).Name(); got != jsonString(t, name) || added.Value != string(bytes.TrimSpace(value)) {
				t.Fatalf("WithMember(%q, %q, %q) = %q: added %s:%s", obj, name, value, out, added.Key, added.Value)
			}
			after = after[:len(after)-1]
		}
		if !slices.Equal(after, want) {
			t.Fatalf("WithMember(%q, %q, %q) = %q: members %q, want %q", obj, name, value, out, after, want)
		}
	})
}

// jsonString returns what name reads back as once written as a JSON
// string (invalid UTF-8 becomes U+FFFD).
func jsonString(t *testing.T, name string) string {
	b, err := json.Marshal(name)
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// isSubsequence reports whether sub is a subsequence of s: WithoutMember
// only deletes.
func isSubsequence(sub, s []byte) bool {
	r := bytes.NewReader(s)
	for _, c := range sub {
		for {
			b, err := r.ReadByte()
			if err == io.EOF {
				return false
			}
			if b == c {
				break
			}
		}
	}
	return true
}
