package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"skein.dev/pkg/events"
)

// The decoders of untrusted input must never panic, and what they accept
// must be what the session service is promised (STYLE R18).

func FuzzDecodePrompt(f *testing.F) {
	for _, seed := range []string{
		`{"content":[{"type":"text","text":"hi"}]}`,
		`{"idempotencyKey":"k","content":[ {"type":"text","text":"hi"} , {"type":"image","data":"AA=="} ]}`,
		`{"content":[]}`,
		`{"content":["x"]}`,
		`{"content":null}`,
		`{"content":[{"type":""}]}`,
		`{"content":[{"type":"text"}]} trailing`,
		`[]`,
		``,
		`{"content":[{"type":"text"}],"extra":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodePrompt(body, "s1", events.PromptLimits{MaxBlocks: 4})
		if err != nil {
			if _, ok := asEventsError(err); !ok {
				t.Fatalf("decodePrompt(%q) = %v, want an *events.Error", body, err)
			}
			return
		}
		var blocks []json.RawMessage
		if json.Unmarshal(req.Content, &blocks) != nil || len(blocks) == 0 || len(blocks) > 4 {
			t.Fatalf("decodePrompt(%q) accepted content %q, want an array of 1 to 4 blocks", body, req.Content)
		}
		if !bytes.Contains(body, req.Content) {
			t.Fatalf("decodePrompt(%q) content %q is not the bytes the client sent", body, req.Content)
		}
		if events.ValidIdempotencyKey(req.IdempotencyKey) != nil {
			t.Fatalf("decodePrompt(%q) accepted idempotency key %q", body, *req.IdempotencyKey)
		}
		if req.SessionID == nil || *req.SessionID != "s1" {
			t.Fatalf("decodePrompt(%q) session = %v, want s1", body, req.SessionID)
		}
	})
}

func FuzzDecodeOpen(f *testing.F) {
	for _, seed := range []string{
		`{"agent":"demo"}`,
		`{"agent":"demo","cwd":"/w","additionalDirectories":["/a"],"env":{"A":"1"},"mcpServers":[{"name":"x"}],"permissionPolicy":"ask","skipOsInstructions":false,"additionalInstructions":"x"}`,
		`{"agent":""}`,
		`{"agent":"demo","env":null}`,
		`{"agent":"demo","env":{"A":1}}`,
		`{"agent":"demo","permissionPolicy":"nope"}`,
		`{"agent":"demo","placement":{"runner":"laptop"}}`,
		`{"agent":"demo","placement":{"labels":{"where":"laptop","os":"mac"}}}`,
		`{"agent":"demo","placement":{"runner":"laptop","labels":{}}}`,
		`{"agent":"demo","placement":{"labels":{"a":1}}}`,
		`{"agent":"demo","budget":{"maxCost":{"amount":2.5,"currency":"USD"}}}`,
		`{"agent":"demo","budget":{"maxCost":{"amount":-1,"currency":"USD"}}}`,
		`{"agent":"demo","budget":{"maxCost":{"amount":1e308,"currency":"usd"}}}`,
		`{"agent":"demo","budget":{}}`,
		`{}`,
		`null`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeOpen(body, "s1")
		if err != nil {
			if _, ok := asEventsError(err); !ok {
				t.Fatalf("decodeOpen(%q) = %v, want an *events.Error", body, err)
			}
			return
		}
		if req.Agent == "" {
			t.Fatalf("decodeOpen(%q) accepted an empty agent", body)
		}
		for name, raw := range map[string]events.JSON{"additionalDirectories": req.AdditionalDirectories, "env": req.Env, "mcpServers": req.McpServers} {
			if len(raw) > 0 && (!json.Valid(raw) || !bytes.Contains(body, raw)) {
				t.Fatalf("decodeOpen(%q) %s = %q, want valid JSON the client sent", body, name, raw)
			}
		}
		if req.SessionID == nil || *req.SessionID != "s1" {
			t.Fatalf("decodeOpen(%q) session = %v, want s1", body, req.SessionID)
		}
		if p := req.Placement; p != nil && (p.Runner != nil) == (len(p.Labels) > 0) {
			t.Fatalf("decodeOpen(%q) accepted placement %+v, want a runner or labels", body, p)
		}
		if b := req.Budget; b != nil && (b.MaxCost == nil || b.Validate() != nil) {
			t.Fatalf("decodeOpen(%q) accepted budget %+v, want a valid cap", body, b.MaxCost)
		}
	})
}

func FuzzParseHistoryQuery(f *testing.F) {
	for _, seed := range []string{"after=1", "before=9&limit=10", "after=1&before=2", "limit=0", "after=%2B1", "after=1&after=1", "x=1", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		req, err := parseHistoryQuery(q)
		if err != nil {
			if _, ok := asEventsError(err); !ok {
				t.Fatalf("parseHistoryQuery(%q) = %v, want an *events.Error", raw, err)
			}
			return
		}
		if req.After != nil && req.Before != nil {
			t.Fatalf("parseHistoryQuery(%q) accepted both after and before", raw)
		}
		if req.Limit != nil && (*req.Limit == 0 || *req.Limit > events.MaxHistoryLimit) {
			t.Fatalf("parseHistoryQuery(%q) accepted limit %d", raw, *req.Limit)
		}
		for k := range q {
			if k != "after" && k != "before" && k != "limit" {
				t.Fatalf("parseHistoryQuery(%q) accepted parameter %q", raw, k)
			}
		}
	})
}

func FuzzParseListQuery(f *testing.F) {
	for _, seed := range []string{"limit=2", "cursor=l1AAAAAAAAAAAHMx&limit=10", "limit=0", "limit=10001", "cursor=a&cursor=b", "x=1", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		req, err := parseListQuery(q)
		if err != nil {
			if _, ok := asEventsError(err); !ok {
				t.Fatalf("parseListQuery(%q) = %v, want an *events.Error", raw, err)
			}
			return
		}
		if req.Limit != nil && (*req.Limit == 0 || *req.Limit > events.MaxListLimit) {
			t.Fatalf("parseListQuery(%q) accepted limit %d", raw, *req.Limit)
		}
		if req.Cursor != nil && *req.Cursor != q.Get("cursor") {
			t.Fatalf("parseListQuery(%q) took cursor %q", raw, *req.Cursor)
		}
		for k := range q {
			if k != "cursor" && k != "limit" {
				t.Fatalf("parseListQuery(%q) accepted parameter %q", raw, k)
			}
		}
	})
}

func FuzzParseWatchQuery(f *testing.F) {
	for _, seed := range []string{"after=3&timeout=15", "timeout=500ms", "timeout=30s", "timeout=31", "limit=0", "after=x", "x=1", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		wq, err := parseWatchQuery(q)
		if err != nil {
			if _, ok := asEventsError(err); !ok {
				t.Fatalf("parseWatchQuery(%q) = %v, want an *events.Error", raw, err)
			}
			return
		}
		if wq.timeout <= 0 || wq.timeout > MaxWatchTimeout {
			t.Fatalf("parseWatchQuery(%q) accepted timeout %v", raw, wq.timeout)
		}
		if wq.limit != nil && (*wq.limit == 0 || *wq.limit > events.MaxHistoryLimit) {
			t.Fatalf("parseWatchQuery(%q) accepted limit %d", raw, *wq.limit)
		}
	})
}

func FuzzParseStreamCursor(f *testing.F) {
	f.Add("", "after=5")
	f.Add("7", "after=5")
	f.Add("x", "")
	f.Add("", "after=1&after=2")
	f.Fuzz(func(t *testing.T, lastEventID, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		h := http.Header{}
		h.Set("Last-Event-ID", lastEventID)
		if _, err := parseStreamCursor(h, q); err != nil {
			return
		}
		// Whatever was accepted is plain decimal digits: the cursor came
		// from the header when it is set, else from ?after.
		used := h.Get("Last-Event-ID")
		if used == "" {
			used = q.Get("after")
		}
		if strings.Trim(used, "0123456789") != "" {
			t.Fatalf("parseStreamCursor(%q, %q) accepted %q", lastEventID, raw, used)
		}
	})
}

// FuzzDecodeRespond: an accepted answer has an option ID of 1 to
// maxOptionID bytes that the client sent (as a JSON string), and nothing
// else.
func FuzzDecodeRespond(f *testing.F) {
	for _, seed := range []string{
		`{"optionId":"allow_once"}`,
		`{"optionId":"\u00e9\n"}`,
		`{"optionId":""}`,
		`{"optionId":null}`,
		`{"optionId":1}`,
		`{}`,
		`{"optionId":"a","x":1}`,
		`{"optionId":"a"} {}`,
		`null`,
		``,
	} {
		f.Add([]byte(seed), "perm_1")
	}
	for _, id := range []string{"", " ", "a b", "\x00", "\x7f", "é", "a.b*>", strings.Repeat("p", 256), strings.Repeat("p", 257)} {
		f.Add([]byte(`{"optionId":"allow"}`), id)
	}
	f.Fuzz(func(t *testing.T, body []byte, requestID string) {
		req, err := decodeRespond(body, "s1", requestID)
		if err != nil {
			if _, ok := asEventsError(err); !ok {
				t.Fatalf("decodeRespond(%q, %q) = %v, want an *events.Error", body, requestID, err)
			}
			return
		}
		if req.OptionID == "" || len(req.OptionID) > events.MaxOptionIDBytes {
			t.Fatalf("decodeRespond(%q) accepted option ID %q", body, req.OptionID)
		}
		if req.RequestID != requestID || requestID == "" || len(requestID) > events.MaxRequestIDBytes {
			t.Fatalf("decodeRespond(%q, %q) request ID = %q", body, requestID, req.RequestID)
		}
		for _, c := range []byte(requestID) {
			if c <= ' ' || c >= 0x7f {
				t.Fatalf("decodeRespond accepted request ID byte %#x", c)
			}
		}
		var again struct {
			OptionID string `json:"optionId"`
		}
		if err := json.Unmarshal(body, &again); err != nil || again.OptionID != req.OptionID {
			t.Fatalf("decodeRespond(%q) = %q, but the body decodes to %q (%v)", body, req.OptionID, again.OptionID, err)
		}
	})
}

// FuzzDecodeEmpty: a control body (cancel, unload, delete) is accepted
// only when it is blank or an empty JSON object.
func FuzzDecodeEmpty(f *testing.F) {
	for _, seed := range []string{``, ` `, `{}`, ` { } `, `{"x":1}`, `null`, `[]`, `{} {}`, `{`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := decodeEmpty(body)
		if err != nil {
			if _, ok := asEventsError(err); !ok {
				t.Fatalf("decodeEmpty(%q) = %v, want an *events.Error", body, err)
			}
			return
		}
		trimmed := strings.Trim(string(body), " \t\r\n")
		var obj map[string]json.RawMessage
		if trimmed != "" && (json.Unmarshal(body, &obj) != nil || obj == nil || len(obj) != 0) {
			t.Fatalf("decodeEmpty(%q) accepted a body that is neither blank nor {}", body)
		}
	})
}

// FuzzAppendData: every line appendData writes is a data field without a
// line break inside, and an SSE client joining them gets data back with
// line ends normalised to LF.
func FuzzAppendData(f *testing.F) {
	for _, seed := range []string{"", "{}", "a\nb", "a\r\nb", "a\rb", "\n", "\r\n\r\n", "a\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out := appendData(nil, data)
		if !bytes.HasSuffix(out, []byte("\n")) {
			t.Fatalf("appendData(%q) = %q, want a final LF", data, out)
		}
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		var values []string
		for _, l := range lines {
			v, ok := strings.CutPrefix(l, "data: ")
			if !ok || strings.ContainsAny(v, "\r\n") {
				t.Fatalf("appendData(%q) line %q, want a data field on one line", data, l)
			}
			values = append(values, v)
		}
		want := strings.ReplaceAll(strings.ReplaceAll(string(data), "\r\n", "\n"), "\r", "\n")
		if got := strings.Join(values, "\n"); got != want {
			t.Fatalf("appendData(%q) joins to %q, want %q", data, got, want)
		}
	})
}

// asEventsError reports whether err is an *events.Error itself, not
// wrapped: the decoders return codes, never bare Go errors.
func asEventsError(err error) (*events.Error, bool) {
	e, ok := err.(*events.Error)
	return e, ok
}

// BenchmarkRenderHistory measures the JSON of one history page.
func BenchmarkRenderHistory(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		for _, size := range []int{64, 4096} {
			b.Run(fmt.Sprintf("events=%d/text=%d", n, size), func(b *testing.B) {
				update := events.JSON(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + strings.Repeat("x", size) + `"},"_meta":{"k":1}}`)
				page := &events.AcpHistoryPageResponse{HasMoreAfter: true}
				for i := range n {
					page.Events = append(page.Events, events.AcpDurableHistoryEntry{
						SessionID: "main",
						Sequence:  uint64(1000 + 3*i),
						EventNo:   uint64(1 + i),
						Timestamp: "2026-01-02T03:04:05.123456789Z",
						Event:     events.Union[events.AcpDurableEvent]{V: &events.AcpDurableSessionUpdate{Update: update}},
					})
				}
				out, err := renderHistory(page)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(out)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := renderHistory(page); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n), "events/op")
			})
		}
	}
}

func FuzzDecodeSetConfig(f *testing.F) {
	for _, seed := range []string{
		`{"value":"code"}`,
		`{"value":true}`,
		` { "value" : false } `,
		`{"value":""}`,
		`{"value":"\u00e9\n"}`,
		"{\"value\":\"\xff\"}",
		`{"value":null}`,
		`{"value":1}`,
		`{"value":["a"]}`,
		`{"value":"a","x":1}`,
		`{}`,
		`"a"`,
		``,
	} {
		f.Add([]byte(seed), "mode")
	}
	for _, id := range []string{"", " ", "a b", "\x00", "\x7f", "é", "a.b*>", strings.Repeat("c", 256), strings.Repeat("c", 257)} {
		f.Add([]byte(`{"value":true}`), id)
	}
	f.Fuzz(func(t *testing.T, body []byte, configID string) {
		req, err := decodeSetConfig(body, "s1", configID)
		if err != nil {
			if _, ok := asEventsError(err); !ok {
				t.Fatalf("decodeSetConfig(%q, %q) = %v, want an *events.Error", body, configID, err)
			}
			return
		}
		if req.ConfigID != configID || configID == "" || len(configID) > events.MaxConfigIDBytes {
			t.Fatalf("decodeSetConfig(%q, %q) config ID = %q", body, configID, req.ConfigID)
		}
		for _, c := range []byte(configID) {
			if c <= ' ' || c >= 0x7f {
				t.Fatalf("decodeSetConfig accepted config ID byte %#x", c)
			}
		}
		value := []byte(req.Value)
		if !bytes.Contains(body, value) {
			t.Fatalf("decodeSetConfig(%q) value %q is not the bytes the client sent", body, value)
		}
		var v any
		if json.Unmarshal(value, &v) != nil || !utf8.Valid(value) {
			t.Fatalf("decodeSetConfig(%q) accepted %q, not valid JSON", body, value)
		}
		switch v.(type) {
		case string, bool:
		default:
			t.Fatalf("decodeSetConfig(%q) accepted %q, neither a string nor a boolean", body, value)
		}
	})
}
