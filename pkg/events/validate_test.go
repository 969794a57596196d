package events_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

// wantValid checks a Validate result: the session when code is "", else
// an *Error with code and no session.
func wantValid(t *testing.T, got events.SessionID, err error, want events.SessionID, code events.Code) {
	t.Helper()
	if code == "" {
		if err != nil || got != want {
			t.Errorf("Validate() = %q, %v; want %q, nil", got, err, want)
		}
		return
	}
	if got != "" || !errors.Is(err, &events.Error{Code: code}) {
		t.Errorf("Validate() = %q, %v; want %s", got, err, code)
	}
}

func TestPromptValidate(t *testing.T) {
	const text = `[{"type":"text","text":"hi"}]`
	lim := events.PromptLimits{MaxBytes: 200, MaxBlocks: 2}
	tests := []struct {
		name    string
		sid     *string
		key     *string
		content string
		want    events.SessionID
		code    events.Code
	}{
		{"minimal", nil, nil, text, "main", ""},
		{"named, keyed", new("s1"), new("k-1:~!"), text, "s1", ""},
		{"two blocks", nil, nil, `[{"type":"text","text":"a"},{"type":"image","data":""}]`, "main", ""},
		{"bad session", new("a b"), nil, text, "", events.CodeInvalidSessionID},
		{"empty key", nil, new(""), text, "", events.CodeInvalidRequest},
		{"key with a space", nil, new("a b"), text, "", events.CodeInvalidRequest},
		{"key with a newline", nil, new("a\nb"), text, "", events.CodeInvalidRequest},
		{"key of non-ASCII", nil, new("clé"), text, "", events.CodeInvalidRequest},
		{"longest key", nil, new(strings.Repeat("k", events.MaxIdempotencyKeyBytes)), text, "main", ""},
		{"key too long", nil, new(strings.Repeat("k", events.MaxIdempotencyKeyBytes+1)), text, "", events.CodeInvalidRequest},
		{"no content", nil, nil, ``, "", events.CodeInvalidRequest},
		{"null content", nil, nil, `null`, "", events.CodeInvalidRequest},
		{"not an array", nil, nil, `{"type":"text"}`, "", events.CodeInvalidRequest},
		{"empty", nil, nil, `[]`, "", events.CodeInvalidRequest},
		{"block not an object", nil, nil, `["text"]`, "", events.CodeInvalidRequest},
		{"block without a type", nil, nil, `[{"text":"hi"}]`, "", events.CodeInvalidRequest},
		{"empty type", nil, nil, `[{"type":""}]`, "", events.CodeInvalidRequest},
		{"type not a string", nil, nil, `[{"type":1}]`, "", events.CodeInvalidRequest},
		{"too many blocks", nil, nil, `[{"type":"a"},{"type":"b"},{"type":"c"}]`, "", events.CodePayloadTooLarge},
		{"too many bytes", nil, nil, `[{"type":"text","text":"` + strings.Repeat("x", 200) + `"}]`, "", events.CodePayloadTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &events.AcpPromptRequest{SessionID: tt.sid, IdempotencyKey: tt.key, Content: events.JSON(tt.content)}
			got, err := req.Validate(lim)
			wantValid(t, got, err, tt.want, tt.code)
		})
	}
}

func TestPromptLimitsDefaults(t *testing.T) {
	blocks := "[" + strings.Repeat(`{"type":"t"},`, events.DefaultMaxPromptBlocks) + `{"type":"t"}]`
	_, err := (&events.AcpPromptRequest{Content: events.JSON(blocks)}).Validate(events.PromptLimits{})
	if !errors.Is(err, &events.Error{Code: events.CodePayloadTooLarge}) {
		t.Errorf("Validate(%d blocks, zero limits) = %v, want %s", events.DefaultMaxPromptBlocks+1, err, events.CodePayloadTooLarge)
	}
}

func TestOpenValidate(t *testing.T) {
	tests := []struct {
		name string
		req  events.AcpOpenSessionRequest
		want events.SessionID
		code events.Code
	}{
		{"minimal", events.AcpOpenSessionRequest{Agent: "demo"}, "main", ""},
		{"everything", events.AcpOpenSessionRequest{
			SessionID: new("s1"), Agent: "demo", Cwd: new("/w"),
			AdditionalDirectories: events.JSON(`["/a","/b"]`), Env: events.JSON(`{"A":"1"}`),
			McpServers: events.JSON(`[{"name":"x"}]`), PermissionPolicy: new(events.PolicyAsk),
		}, "s1", ""},
		{"no agent", events.AcpOpenSessionRequest{}, "", events.CodeInvalidRequest},
		{"agent not an ID", events.AcpOpenSessionRequest{Agent: "../x"}, "", events.CodeUnknownAgent},
		{"bad session", events.AcpOpenSessionRequest{SessionID: new(""), Agent: "demo"}, "", events.CodeInvalidSessionID},
		{"empty cwd", events.AcpOpenSessionRequest{Agent: "demo", Cwd: new("")}, "", events.CodeInvalidRequest},
		{"relative cwd", events.AcpOpenSessionRequest{Agent: "demo", Cwd: new("w")}, "", events.CodeInvalidRequest},
		{"directories not an array", events.AcpOpenSessionRequest{Agent: "demo", AdditionalDirectories: events.JSON(`"/a"`)}, "", events.CodeInvalidRequest},
		{"relative directory", events.AcpOpenSessionRequest{Agent: "demo", AdditionalDirectories: events.JSON(`["/a","b"]`)}, "", events.CodeInvalidRequest},
		{"env of numbers", events.AcpOpenSessionRequest{Agent: "demo", Env: events.JSON(`{"A":1}`)}, "", events.CodeInvalidRequest},
		{"env null", events.AcpOpenSessionRequest{Agent: "demo", Env: events.JSON(`null`)}, "", events.CodeInvalidRequest},
		{"mcpServers an object", events.AcpOpenSessionRequest{Agent: "demo", McpServers: events.JSON(`{}`)}, "", events.CodeInvalidRequest},
		{"mcpServers of strings", events.AcpOpenSessionRequest{Agent: "demo", McpServers: events.JSON(`["x"]`)}, "", events.CodeInvalidRequest},
		{"mcpServers with null", events.AcpOpenSessionRequest{Agent: "demo", McpServers: events.JSON(`[null]`)}, "", events.CodeInvalidRequest},
		{"bad policy", events.AcpOpenSessionRequest{Agent: "demo", PermissionPolicy: new("maybe")}, "", events.CodeInvalidRequest},
		{"placed on a runner", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Runner: new("laptop")}}, "main", ""},
		{"placed by labels", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Labels: map[string]string{"where": "laptop", "gpu.vendor": "x_1-2"}}}, "main", ""},
		{"placed by 16 labels", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Labels: labels(16)}}, "main", ""},
		{"label of 63 bytes", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Labels: map[string]string{strings.Repeat("k", 63): strings.Repeat("v", 63)}}}, "main", ""},
		{"placement empty", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{}}, "", events.CodeInvalidRequest},
		{"placement with no labels", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Labels: map[string]string{}}}, "", events.CodeInvalidRequest},
		{"placement both", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Runner: new("r1"), Labels: map[string]string{"a": "b"}}}, "", events.CodeInvalidRequest},
		{"placement runner empty", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Runner: new("")}}, "", events.CodeInvalidRequest},
		{"placement runner not an ID", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Runner: new("a.b")}}, "", events.CodeInvalidRequest},
		{"17 labels", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Labels: labels(17)}}, "", events.CodeInvalidRequest},
		{"label key empty", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Labels: map[string]string{"": "v"}}}, "", events.CodeInvalidRequest},
		{"label value empty", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Labels: map[string]string{"k": ""}}}, "", events.CodeInvalidRequest},
		{"label key of 64 bytes", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Labels: map[string]string{strings.Repeat("k", 64): "v"}}}, "", events.CodeInvalidRequest},
		{"label value of 64 bytes", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Labels: map[string]string{"k": strings.Repeat("v", 64)}}}, "", events.CodeInvalidRequest},
		{"label with =", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Labels: map[string]string{"a=b": "c"}}}, "", events.CodeInvalidRequest},
		{"label with a comma", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Labels: map[string]string{"a": "b,c"}}}, "", events.CodeInvalidRequest},
		{"label with a space", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Labels: map[string]string{"a": "b c"}}}, "", events.CodeInvalidRequest},
		{"label not ASCII", events.AcpOpenSessionRequest{Agent: "demo", Placement: &events.Placement{Labels: map[string]string{"wo": "Köln"}}}, "", events.CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.req.Validate()
			wantValid(t, got, err, tt.want, tt.code)
		})
	}
}

// labels returns n distinct labels.
func labels(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	return m
}

func TestSessionOnlyValidate(t *testing.T) {
	for name, validate := range map[string]func(*string) (events.SessionID, error){
		"cancel": func(s *string) (events.SessionID, error) {
			return (&events.AcpCancelPromptRequest{SessionID: s}).Validate()
		},
		"unload": func(s *string) (events.SessionID, error) {
			return (&events.AcpUnloadSessionRequest{SessionID: s}).Validate()
		},
		"delete": func(s *string) (events.SessionID, error) {
			return (&events.AcpDeleteSessionRequest{SessionID: s}).Validate()
		},
		"get": func(s *string) (events.SessionID, error) {
			return (&events.AcpGetDurableSessionRequest{SessionID: s}).Validate()
		},
		"config": func(s *string) (events.SessionID, error) {
			return (&events.AcpGetSessionConfigRequest{SessionID: s}).Validate()
		},
		"capabilities": func(s *string) (events.SessionID, error) {
			return (&events.AcpGetSessionCapabilitiesRequest{SessionID: s}).Validate()
		},
		"agent info": func(s *string) (events.SessionID, error) {
			return (&events.AcpGetSessionAgentInfoRequest{SessionID: s}).Validate()
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := validate(nil)
			wantValid(t, got, err, "main", "")
			got, err = validate(new("s1"))
			wantValid(t, got, err, "s1", "")
			got, err = validate(new(""))
			wantValid(t, got, err, "", events.CodeInvalidSessionID)
			got, err = validate(new("a*"))
			wantValid(t, got, err, "", events.CodeInvalidSessionID)
		})
	}
}

func TestRespondPermissionBounds(t *testing.T) {
	tests := []struct {
		name string
		req  events.AcpRespondPermissionRequest
		code events.Code
	}{
		{"longest", events.AcpRespondPermissionRequest{SessionID: "s1", RequestID: strings.Repeat("r", events.MaxRequestIDBytes), OptionID: strings.Repeat("o", events.MaxOptionIDBytes)}, ""},
		{"request ID too long", events.AcpRespondPermissionRequest{SessionID: "s1", RequestID: strings.Repeat("r", events.MaxRequestIDBytes+1), OptionID: "o"}, events.CodeInvalidRequest},
		{"request ID with a space", events.AcpRespondPermissionRequest{SessionID: "s1", RequestID: "perm 1", OptionID: "o"}, events.CodeInvalidRequest},
		{"option ID too long", events.AcpRespondPermissionRequest{SessionID: "s1", RequestID: "perm_1", OptionID: strings.Repeat("o", events.MaxOptionIDBytes+1)}, events.CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.req.Validate()
			wantValid(t, got, err, "s1", tt.code)
		})
	}
}

func TestSetConfigValidate(t *testing.T) {
	tests := []struct {
		name, id, value string
		code            events.Code
	}{
		{"string", "mode", `"code"`, ""},
		{"boolean", "web_search", `true`, ""},
		{"spaced", "mode", ` false `, ""},
		{"no id", "", `true`, events.CodeInvalidRequest},
		{"id with a space", "a b", `true`, events.CodeInvalidRequest},
		{"id too long", strings.Repeat("c", events.MaxConfigIDBytes+1), `true`, events.CodeInvalidRequest},
		{"no value", "mode", ``, events.CodeInvalidRequest},
		{"null", "mode", `null`, events.CodeInvalidRequest},
		{"number", "mode", `1`, events.CodeInvalidRequest},
		{"object", "mode", `{}`, events.CodeInvalidRequest},
		{"broken string", "mode", `"abc`, events.CodeInvalidRequest},
		{"invalid UTF-8", "mode", "\"\xff\"", events.CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &events.AcpSetSessionConfigOptionRequest{ConfigID: tt.id, Value: events.JSON(tt.value)}
			got, err := req.Validate()
			wantValid(t, got, err, "main", tt.code)
		})
	}
}

func TestReadHistoryValidate(t *testing.T) {
	u := func(n uint64) *uint64 { return &n }
	l := func(n uint32) *uint32 { return &n }
	tests := []struct {
		name string
		req  events.AcpReadHistoryRequest
		code events.Code
	}{
		{"newest page", events.AcpReadHistoryRequest{}, ""},
		{"after", events.AcpReadHistoryRequest{After: u(0), Limit: l(1)}, ""},
		{"before, largest page", events.AcpReadHistoryRequest{Before: u(9), Limit: l(events.MaxHistoryLimit)}, ""},
		{"before and after", events.AcpReadHistoryRequest{Before: u(9), After: u(1)}, events.CodeInvalidCursor},
		{"zero limit", events.AcpReadHistoryRequest{Limit: l(0)}, events.CodeInvalidRequest},
		{"limit too large", events.AcpReadHistoryRequest{Limit: l(events.MaxHistoryLimit + 1)}, events.CodeInvalidRequest},
		{"bad session", events.AcpReadHistoryRequest{SessionID: new("a.b")}, events.CodeInvalidSessionID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.req.Validate()
			wantValid(t, got, err, "main", tt.code)
		})
	}
}

// checkValidateResult: a validator never panics, and answers either a
// valid session ID or a registered code with no session.
func checkValidateResult(t *testing.T, sid events.SessionID, err error) {
	t.Helper()
	if err == nil {
		if !sid.Valid() {
			t.Fatalf("Validate accepted with session %q, which is not valid", sid)
		}
		return
	}
	e, ok := errors.AsType[*events.Error](err)
	if !ok || !e.Code.Known() || e.Code == events.CodeInternal || sid != "" {
		t.Fatalf("Validate = %q, %v; want a registered, non-internal code and no session", sid, err)
	}
}

func FuzzPromptValidate(f *testing.F) {
	f.Add("s1", true, "key-1", []byte(`[{"type":"text","text":"hi"}]`))
	f.Add("", false, "", []byte(`[]`))
	f.Add("a.b", true, "a b", []byte(`[{"type":1}]`))
	f.Add("main", false, "", []byte(`[{"type":"text"},"x",null]`))
	f.Add("main", true, "\xff", []byte(`{"type":"text"}`))
	f.Fuzz(func(t *testing.T, sid string, keyed bool, key string, content []byte) {
		req := &events.AcpPromptRequest{Content: events.JSON(content)}
		if sid != "" {
			req.SessionID = &sid
		}
		if keyed {
			req.IdempotencyKey = &key
		}
		got, err := req.Validate(events.PromptLimits{MaxBytes: 4096, MaxBlocks: 8})
		checkValidateResult(t, got, err)
		if err == nil && keyed {
			// An accepted key fits a NATS header: one line of printable ASCII.
			if strings.ContainsAny(key, " \r\n\t") || len(key) > events.MaxIdempotencyKeyBytes {
				t.Fatalf("accepted idempotency key %q", key)
			}
		}
	})
}

func FuzzOpenValidate(f *testing.F) {
	f.Add("demo", "/w", []byte(`["/a"]`), []byte(`{"A":"1"}`), []byte(`[{"name":"x"}]`), "ask", "", "where", "laptop")
	f.Add("", "", []byte(`null`), []byte(`[]`), []byte(`{}`), "", "laptop", "", "")
	f.Add("../x", "w", []byte(`["a"]`), []byte(`{"A":1}`), []byte(`[null]`), "maybe", "a.b", "k=v", "")
	f.Fuzz(func(t *testing.T, agent, cwd string, dirs, env, mcp []byte, policy, runner, key, value string) {
		req := &events.AcpOpenSessionRequest{Agent: agent, AdditionalDirectories: dirs, Env: env, McpServers: mcp}
		if cwd != "" {
			req.Cwd = &cwd
		}
		if policy != "" {
			req.PermissionPolicy = &policy
		}
		if runner != "" || key != "" {
			req.Placement = &events.Placement{}
			if runner != "" {
				req.Placement.Runner = &runner
			}
			if key != "" {
				req.Placement.Labels = map[string]string{key: value}
			}
		}
		got, err := req.Validate()
		checkValidateResult(t, got, err)
		if err != nil || req.Placement == nil {
			return
		}
		// An accepted placement names exactly one of the two, and its
		// names are subject tokens and "k=v" pairs that read back.
		p := req.Placement
		if (p.Runner != nil) == (len(p.Labels) > 0) || p.Runner != nil && !events.RunnerID(*p.Runner).Valid() {
			t.Fatalf("accepted placement %+v", p)
		}
		if key != "" && strings.ContainsAny(key+value, "=, \t\n") || len(key) > events.MaxLabelBytes || len(value) > events.MaxLabelBytes {
			t.Fatalf("accepted label %q=%q", key, value)
		}
	})
}

func FuzzSetConfigValidate(f *testing.F) {
	f.Add("mode", []byte(`"code"`))
	f.Add("web search", []byte(`true`))
	f.Add("", []byte("\"\xff\""))
	f.Fuzz(func(t *testing.T, id string, value []byte) {
		got, err := (&events.AcpSetSessionConfigOptionRequest{ConfigID: id, Value: value}).Validate()
		checkValidateResult(t, got, err)
	})
}

func FuzzReadHistoryValidate(f *testing.F) {
	f.Add("s1", true, uint64(1), false, uint64(0), uint32(10))
	f.Add("", true, uint64(5), true, uint64(9), uint32(0))
	f.Fuzz(func(t *testing.T, sid string, hasBefore bool, before uint64, hasAfter bool, after uint64, limit uint32) {
		req := &events.AcpReadHistoryRequest{Limit: &limit}
		if sid != "" {
			req.SessionID = &sid
		}
		if hasBefore {
			req.Before = &before
		}
		if hasAfter {
			req.After = &after
		}
		got, err := req.Validate()
		checkValidateResult(t, got, err)
		if err == nil && (hasBefore && hasAfter || limit == 0 || limit > events.MaxHistoryLimit) {
			t.Fatalf("Validate accepted %+v", req)
		}
	})
}

func FuzzRespondPermissionValidate(f *testing.F) {
	f.Add("s1", "perm_1", "allow")
	f.Add("", "", "")
	f.Add("s1", "perm 1", "x")
	f.Fuzz(func(t *testing.T, sid, requestID, optionID string) {
		got, err := (&events.AcpRespondPermissionRequest{SessionID: sid, RequestID: requestID, OptionID: optionID}).Validate()
		checkValidateResult(t, got, err)
	})
}
