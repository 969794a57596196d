package acpwire_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"skein.dev/pkg/acp/acpwire"
)

// parseSeeds are lines worth starting from besides the transcripts.
var parseSeeds = []string{
	``, `{}`, `[]`, `null`, `"x"`,
	`{"jsonrpc":"2.0","method":"m"}`,
	`{"jsonrpc":"2.0","id":null,"result":null}`,
	`{"jsonrpc":"2.0","id":"s","error":{"code":-32601,"message":"m","data":[1,{"a":"\u00e9"}]}}`,
	`{"jsonrpc":"2\u002e0","\u0069d":1e2,"method":"\ud83d\ude00","params":[{"]":"}"}]}`,
	`{"jsonrpc":"2.0","id":1,"id":1,"result":{}}`,
	` {"jsonrpc" : "2.0" , "method" : "m" , "params" : { } } `,
	notif1, notif2,
	`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"plan","messageId":null,"x":["\"}",{"y":-0.5e1}]}}}`,
	`{"jsonrpc":"2.0","method":"session/update","params":{"update":{"sessionUpdate":"a","sessionUpdate":"b"},"sessionId":"s"}}`,
}

// FuzzParse checks that Parse never panics, returns only typed errors, and
// agrees with encoding/json on every message it accepts.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	for _, tr := range readTranscripts(f) {
		for _, l := range tr.Lines {
			f.Add(l.JSON)
		}
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := acpwire.Parse(line)
		if err != nil {
			if !isKind(err, acpwire.ErrProtocol) {
				t.Fatalf("Parse(%q) error = %v, want a %s error", line, err, acpwire.ErrProtocol)
			}
			return
		}
		if !bytes.Equal(m.Raw, line) {
			t.Fatalf("Parse(%q).Raw = %q, want the line", line, m.Raw)
		}
		again, err := acpwire.Parse(bytes.Clone(m.Raw))
		if err != nil {
			t.Fatalf("Parse(Raw) = %v after Parse(%q) succeeded", err, line)
		}
		if diff := cmp.Diff(m, again); diff != "" {
			t.Fatalf("Parse(Raw) differs from Parse(%q) (-first +second):\n%s", line, diff)
		}

		// A session/update's params read without validation (Parse did
		// that) must read as they read validated.
		if m.Method == acpwire.MethodSessionUpdate {
			got, err := m.SessionUpdate()
			want, wantErr := acpwire.ParseSessionUpdate(m.Params)
			if (err != nil) != (wantErr != nil) || !cmp.Equal(got, want) {
				t.Fatalf("Parse(%q).SessionUpdate() = %+v, %v; ParseSessionUpdate says %+v, %v", line, got, err, want, wantErr)
			}
			if err != nil && !isKind(err, acpwire.ErrProtocol) {
				t.Fatalf("Parse(%q).SessionUpdate() error = %v, want a %s error", line, err, acpwire.ErrProtocol)
			}
		}

		// encoding/json must see the same message.
		kind, obj := oracleKind(line)
		if kind != m.Kind() {
			t.Fatalf("Parse(%q).Kind() = %v, encoding/json says %v", line, m.Kind(), kind)
		}
		for name, got := range map[string]json.RawMessage{"id": m.ID, "params": m.Params, "result": m.Result} {
			if !bytes.Equal(got, obj[name]) {
				t.Fatalf("Parse(%q): %s = %q, encoding/json says %q", line, name, got, obj[name])
			}
			if cap(got) != len(got) {
				t.Fatalf("Parse(%q): %s has spare capacity %d: appending to it would overwrite Raw", line, name, cap(got)-len(got))
			}
		}
		var version, method string
		if json.Unmarshal(obj["jsonrpc"], &version) != nil || version != "2.0" {
			t.Fatalf("Parse(%q) accepted jsonrpc %s", line, obj["jsonrpc"])
		}
		if m.Method != "" && (json.Unmarshal(obj["method"], &method) != nil || method != m.Method) {
			t.Fatalf("Parse(%q).Method = %q, encoding/json says %q", line, m.Method, method)
		}
		if m.Error != nil {
			var e struct {
				Code    int             `json:"code"`
				Message string          `json:"message"`
				Data    json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal(obj["error"], &e); err == nil && (e.Code != m.Error.Code || e.Message != m.Error.Message) {
				t.Fatalf("Parse(%q).Error = %+v, encoding/json says %+v", line, m.Error, e)
			}
		}
	})
}

// fuzzMaxLine is the small line limit FuzzFraming runs with.
const fuzzMaxLine = 256

// FuzzFraming pushes arbitrary bytes through a Conn with a small line limit.
// The Conn must not panic or hang, must hand each complete, non-blank line
// up to the first over-long one to exactly one callback (or answer it,
// for requests) in order and byte for byte, and must end with the right
// error.
func FuzzFraming(f *testing.F) {
	f.Add([]byte(notif1 + "\n" + notif2 + "\n"))
	f.Add([]byte("junk\n\n \r\n" + notif2 + "\n[1]\n" + notif2[:20]))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"u-1","method":"fs/read_text_file","params":{}}` + "\n" + `{"jsonrpc":"2.0","id":0,"result":{}}`))
	f.Add(bytes.Repeat([]byte("x"), fuzzMaxLine+1))
	for _, tr := range readTranscripts(f) {
		var b []byte
		for _, l := range tr.Lines {
			if l.Dir == "A->C" && len(l.JSON) <= fuzzMaxLine {
				b = append(append(b, l.JSON...), '\n')
			}
		}
		if len(b) > 0 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec := &recorder{}
		opts := rec.options()
		opts.OnRequest = nil // answered by the Conn: check the answers
		opts.MaxLineBytes = fuzzMaxLine
		var out syncBuffer
		c := acpwire.NewConn(bytes.NewReader(data), &out, opts)
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("Conn did not stop on %d bytes of input", len(data))
		}

		var want []event
		var requests []*acpwire.Message
		wantErr := acpwire.ErrClosed
		segs := bytes.Split(data, []byte("\n"))
		for i, seg := range segs {
			if i == len(segs)-1 && len(seg) == 0 {
				break // the input ended with '\n'
			}
			if len(seg) > fuzzMaxLine {
				wantErr = acpwire.ErrLineTooLong
				break
			}
			if len(bytes.Trim(seg, " \t\r")) == 0 {
				continue
			}
			m, err := acpwire.Parse(seg)
			switch {
			case err != nil:
				want = append(want, event{"protocol-error", string(seg)})
			case m.Kind() == acpwire.KindRequest:
				requests = append(requests, m)
			default:
				want = append(want, event{m.Kind().String(), string(seg)})
			}
		}
		if diff := cmp.Diff(want, rec.all()); diff != "" {
			t.Fatalf("callbacks for %q (-want +got):\n%s", data, diff)
		}
		if err := c.Err(); !isKind(err, wantErr) {
			t.Fatalf("Err() = %v, want %s", err, wantErr)
		}

		// Each request got one -32601 answer, in order, echoing its id.
		answers := bytes.Split(bytes.TrimSuffix([]byte(out.String()), []byte("\n")), []byte("\n"))
		if len(requests) == 0 {
			answers = nil
		}
		if len(answers) != len(requests) {
			t.Fatalf("%d answers for %d requests: %q", len(answers), len(requests), out.String())
		}
		for i, a := range answers {
			m, err := acpwire.Parse(a)
			if err != nil || m.Kind() != acpwire.KindResponse || !bytes.Equal(m.ID, requests[i].ID) ||
				m.Error == nil || m.Error.Code != acpwire.CodeMethodNotFound {
				t.Fatalf("answer %q to %q (err %v), want -32601 with the same id", a, requests[i].Raw, err)
			}
		}
	})
}
