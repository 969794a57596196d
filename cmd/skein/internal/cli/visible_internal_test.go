package cli

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzVisibleJSON: visibleJSON of a JSON document decodes to the same
// value, and holds nothing a terminal acts on; visibleStrings never
// panics, and what it returns is JSON whose strings are all Visible.
func FuzzVisibleJSON(f *testing.F) {
	for _, s := range []string{`{}`, `"a"`, `{"a":"\u001b[2J","b":["\u009b","x\u202ey"]}`, "\"\u009b\"", "\"\u202e\"", `[1,2.5e3,null,true]`, `{"\u001b":1}`, "\"\xff\"", `"😀"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out := visibleJSON(raw)
		for _, r := range string(out) {
			if (r < 0x20 && r != '\n' && r != '\t' && r != '\r') || (r >= 0x7f && r < 0xa0) {
				t.Fatalf("visibleJSON(%q) = %q holds %U", raw, out, r)
			}
		}
		var before, after any
		if json.Unmarshal(raw, &before) == nil && utf8.Valid(raw) {
			if err := json.Unmarshal(out, &after); err != nil || !reflect.DeepEqual(before, after) {
				t.Fatalf("visibleJSON(%q) = %q: decodes to %v (%v), want %v", raw, out, after, err, before)
			}
		}
		vs, err := visibleStrings(raw)
		if err != nil {
			return
		}
		var v any
		if err := json.Unmarshal(vs, &v); err != nil {
			t.Fatalf("visibleStrings(%q) = %q, not JSON: %v", raw, vs, err)
		}
		var check func(any)
		check = func(x any) {
			switch x := x.(type) {
			case string:
				if Visible(x) != x || strings.ContainsRune(x, '\x1b') {
					t.Fatalf("visibleStrings(%q) holds %q", raw, x)
				}
			case []any:
				for _, y := range x {
					check(y)
				}
			case map[string]any:
				for k, y := range x {
					check(k)
					check(y)
				}
			}
		}
		check(v)
	})
}
