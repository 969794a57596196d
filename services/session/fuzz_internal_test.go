package session

import (
	"encoding/json"
	"strings"
	"testing"
)

// Adapter output is untrusted: the JSON the session service rewrites
// (coalescing chunks, removing the private session ID) must never panic,
// must stay valid JSON, and must keep what it promises to keep.

func FuzzCoalesce(f *testing.F) {
	f.Add(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"},"messageId":"m"}`, `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"b"}}`, 64)
	f.Add(`{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"AA=="}}`, `{"content":{"text":"x","type":"text"},"_meta":{"k":1}}`, 4096)
	f.Add(`{"content":{"type":"text","text":"\u00e9\u00e9\u00e9"}}`, `not json`, 70)
	f.Fuzz(func(t *testing.T, a, b string, maxRecord int) {
		if maxRecord < 0 || maxRecord > 1<<20 {
			return
		}
		chunks := []json.RawMessage{json.RawMessage(a), json.RawMessage(b)}
		out, err := coalesce(chunks, maxRecord)
		if err != nil {
			return
		}
		var want, got strings.Builder
		allText := true
		for _, c := range chunks {
			text, ok := chunkText(c)
			allText = allText && ok
			want.WriteString(text)
		}
		for _, u := range out {
			if allText && !json.Valid(u) {
				t.Fatalf("coalesce(%q, %q) wrote invalid JSON %q", a, b, u)
			}
			text, _ := chunkText(u)
			got.WriteString(text)
		}
		if allText && got.String() != want.String() {
			t.Fatalf("coalesce(%q, %q) texts = %q, want %q", a, b, got.String(), want.String())
		}
	})
}

func TestIOPos(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
		p  ioPos
	}{
		{"1234", true, ioPos{seq: 1234}},
		{"1234.3", true, ioPos{seq: 1234, n: 3}},
		{"0", false, ioPos{}},
		{"12.0", false, ioPos{}},
		{"12.", false, ioPos{}},
		{".3", false, ioPos{}},
		{"12.-1", false, ioPos{}},
		{"x", false, ioPos{}},
		{"", false, ioPos{}},
	} {
		p, ok := parseIOPos(tc.in)
		if ok != tc.ok || p != tc.p {
			t.Errorf("parseIOPos(%q) = %v, %v; want %v, %v", tc.in, p, ok, tc.p, tc.ok)
		}
		if ok && p.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", p, p.String(), tc.in)
		}
	}
	// In ACP_IO order: 5.1 < 5.2 < 5 (the whole record) < 6.1.
	// Numbered positions compare by number, whatever the sequences: the
	// record numbered 3 was stored last.
	for _, order := range [][]ioPos{
		{{seq: 5, n: 1}, {seq: 5, n: 2}, {seq: 5}, {seq: 6, n: 1}},
		{{seq: 9, no: 2, n: 1}, {seq: 9, no: 2}, {seq: 12, no: 3, n: 1}, {seq: 12, no: 3}, {seq: 10, no: 4}},
	} {
		for i, p := range order {
			for j, q := range order {
				if got := p.after(q); got != (i > j) {
					t.Errorf("%v.after(%v) = %v", p, q, got)
				}
			}
		}
	}
}

func TestResumePoint(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
		p  resumePoint
	}{
		{"12 0", true, resumePoint{from: 12}},
		{"12 7", true, resumePoint{from: 12, applied: ioPos{no: 7}}},
		{"12 7.2 5.3", true, resumePoint{from: 12, applied: ioPos{no: 7, n: 2}, held: ioPos{no: 5, n: 3}}},
		{"12 7 7.1", true, resumePoint{from: 12, applied: ioPos{no: 7}, held: ioPos{no: 7, n: 1}}},
		{"12 7.1 7", false, resumePoint{}}, // held after applied
		{"12 7 8", false, resumePoint{}},
		{"0 7", false, resumePoint{}},
		{"12 0.1", false, resumePoint{}},
		{"12", false, resumePoint{}},
		{"12 7 5 1", false, resumePoint{}},
		{"", false, resumePoint{}},
	} {
		p, ok := parseResumePoint(tc.in)
		if ok != tc.ok || p != tc.p {
			t.Errorf("parseResumePoint(%q) = %+v, %v; want %+v, %v", tc.in, p, ok, tc.p, tc.ok)
		}
		if ok && p.String() != tc.in {
			t.Errorf("%+v.String() = %q, want %q", p, p.String(), tc.in)
		}
	}
}

// FuzzIOPos: what parses prints back to a string that parses the same.
func FuzzIOPos(f *testing.F) {
	for _, s := range []string{"1", "1234.3", "18446744073709551615.2", "0.1", "1.0", "1..2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := parseIOPos(s)
		if !ok {
			return
		}
		if q, ok := parseIOPos(p.String()); !ok || q != p {
			t.Errorf("parseIOPos(%q) = %v, whose String %q parses to %v, %v", s, p, p.String(), q, ok)
		}
	})
}
