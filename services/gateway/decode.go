package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"unicode/utf8"

	"skein.dev/pkg/events"
)

// Request bodies are decoded strictly: one JSON object, no unknown fields,
// nothing after it. A field the gateway does not know is more likely a typo
// (or a feature this gateway lacks) than something safe to drop. Fields of
// schema type JsonUtf8 are kept as the exact bytes the client sent.

// maxIdempotencyKey bounds an idempotency key, in bytes.
const maxIdempotencyKey = 256

// readBody reads r's body, at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, events.Errorf(events.CodePayloadTooLarge, "request body is larger than %d bytes", limit)
		}
		return nil, events.Errorf(events.CodeInvalidRequest, "read request body: %v", err)
	}
	return body, nil
}

// decodeObject decodes body, which must be exactly one JSON object, into v.
func decodeObject(body []byte, v any) error {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return events.Errorf(events.CodeInvalidRequest, "request body must be a JSON object, got nothing")
	}
	if trimmed[0] != '{' {
		return events.Errorf(events.CodeInvalidRequest, "request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return events.Errorf(events.CodeInvalidRequest, "request body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return events.Errorf(events.CodeInvalidRequest, "request body: unexpected data after the JSON object")
	}
	return nil
}

// present reports whether a raw optional field carries a value: absent and
// null are the same.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// openBody is the JSON form of AcpOpenSessionRequest. The session ID comes
// from the URL, so the body cannot name another one.
type openBody struct {
	Agent                  string          `json:"agent"`
	Cwd                    *string         `json:"cwd"`
	AdditionalDirectories  json.RawMessage `json:"additionalDirectories"`
	Env                    json.RawMessage `json:"env"`
	McpServers             json.RawMessage `json:"mcpServers"`
	PermissionPolicy       *string         `json:"permissionPolicy"`
	SkipOsInstructions     *bool           `json:"skipOsInstructions"`
	AdditionalInstructions *string         `json:"additionalInstructions"`
}

// decodeOpen decodes and checks the body of PUT /v1/sessions/{id}. It leaves
// SessionID unset.
func decodeOpen(body []byte) (*events.AcpOpenSessionRequest, error) {
	var b openBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	if b.Agent == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "agent is required")
	}
	if b.Cwd != nil && *b.Cwd == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "cwd must not be empty; omit it for the default")
	}
	req := &events.AcpOpenSessionRequest{
		Agent:                  b.Agent,
		Cwd:                    b.Cwd,
		SkipOsInstructions:     b.SkipOsInstructions,
		AdditionalInstructions: b.AdditionalInstructions,
	}
	if present(b.AdditionalDirectories) {
		var dirs []string
		if err := json.Unmarshal(b.AdditionalDirectories, &dirs); err != nil {
			return nil, events.Errorf(events.CodeInvalidRequest, "additionalDirectories must be an array of strings")
		}
		req.AdditionalDirectories = events.JSON(b.AdditionalDirectories)
	}
	if present(b.Env) {
		var env map[string]string
		if err := json.Unmarshal(b.Env, &env); err != nil {
			return nil, events.Errorf(events.CodeInvalidRequest, "env must be an object of strings")
		}
		req.Env = events.JSON(b.Env)
	}
	if present(b.McpServers) {
		var servers []map[string]json.RawMessage
		if err := json.Unmarshal(b.McpServers, &servers); err != nil {
			return nil, events.Errorf(events.CodeInvalidRequest, "mcpServers must be an array of objects")
		}
		req.McpServers = events.JSON(b.McpServers)
	}
	if b.PermissionPolicy != nil {
		switch *b.PermissionPolicy {
		case events.PolicyAllowAll, events.PolicyRejectAll, events.PolicyAsk:
			req.PermissionPolicy = b.PermissionPolicy
		default:
			return nil, events.Errorf(events.CodeInvalidRequest, "permissionPolicy must be %s, %s or %s",
				events.PolicyAllowAll, events.PolicyRejectAll, events.PolicyAsk)
		}
	}
	return req, nil
}

// isObject reports whether raw, a JSON value, is an object.
func isObject(raw []byte) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}

// promptBody is the JSON form of AcpPromptRequest without its session ID.
type promptBody struct {
	IdempotencyKey *string         `json:"idempotencyKey"`
	Content        json.RawMessage `json:"content"`
}

// decodePrompt decodes and checks the body of POST .../prompt: content is a
// non-empty array of at most maxBlocks ACP content blocks, each an object
// with a type. The blocks themselves are the agent's to interpret and pass
// through byte for byte.
func decodePrompt(body []byte, maxBlocks int) (*events.AcpPromptRequest, error) {
	var b promptBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	if b.IdempotencyKey != nil && (*b.IdempotencyKey == "" || len(*b.IdempotencyKey) > maxIdempotencyKey) {
		return nil, events.Errorf(events.CodeInvalidRequest, "idempotencyKey must be 1 to %d bytes", maxIdempotencyKey)
	}
	if !present(b.Content) {
		return nil, events.Errorf(events.CodeInvalidRequest, "content is required")
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(b.Content, &blocks); err != nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "content must be an array of content blocks")
	}
	switch {
	case len(blocks) == 0:
		return nil, events.Errorf(events.CodeInvalidRequest, "content must not be empty")
	case len(blocks) > maxBlocks:
		return nil, events.Errorf(events.CodePayloadTooLarge, "content has %d blocks, more than %d", len(blocks), maxBlocks)
	}
	for i, raw := range blocks {
		var block struct {
			Type string `json:"type"`
		}
		if !isObject(raw) || json.Unmarshal(raw, &block) != nil || block.Type == "" {
			return nil, events.Errorf(events.CodeInvalidRequest, "content[%d] must be an object with a type", i)
		}
	}
	return &events.AcpPromptRequest{IdempotencyKey: b.IdempotencyKey, Content: events.JSON(b.Content)}, nil
}

// Limits of the permission answer, in bytes. A request ID is Skein's own
// ("perm_" and a NUID), so the bound is generous; an option ID is the
// agent's, so it is looser still.
const (
	maxRequestID = 256
	maxOptionID  = 1024
)

// maxControlBody bounds the body of a cancel, an unload, a delete, a
// permission answer or a config value: the longest valid one, an option ID of maxOptionID bytes written
// entirely as \uXXXX escapes, fits several times over.
const maxControlBody = 16 << 10

// parseRequestID checks a permission request ID from the URL: 1 to
// maxRequestID bytes of printable ASCII without spaces (0x21 to 0x7e). It
// travels in a payload, never in a subject, so '.' and '*' are harmless;
// the bound keeps junk from reaching the session service.
func parseRequestID(s string) (string, error) { return parseToken("requestId", s, maxRequestID) }

// maxConfigID bounds a config option ID from the URL, in bytes.
const maxConfigID = 256

// parseConfigID checks a config option ID from the URL as parseRequestID
// checks a request ID: 1 to maxConfigID bytes of printable ASCII without
// spaces. The option ID is the agent's; whether the agent has it is the
// agent's to say.
func parseConfigID(s string) (string, error) { return parseToken("configId", s, maxConfigID) }

// parseToken checks the path parameter name: 1 to limit bytes of printable
// ASCII without spaces (0x21 to 0x7e).
func parseToken(name, s string, limit int) (string, error) {
	if s == "" || len(s) > limit {
		return "", events.Errorf(events.CodeInvalidRequest, "%s must be 1 to %d bytes", name, limit)
	}
	for i := range len(s) {
		if c := s[i]; c < 0x21 || c > 0x7e {
			return "", events.Errorf(events.CodeInvalidRequest, "%s must be printable ASCII without spaces, got %q", name, truncate(s, 40))
		}
	}
	return s, nil
}

// decodeEmpty checks the body of a control route without parameters
// (cancel, unload, delete): nothing, or an empty JSON object. They have no
// fields yet; rejecting any keeps the door open for ones with a meaning
// later.
func decodeEmpty(body []byte) error {
	if len(bytes.TrimLeft(body, " \t\r\n")) == 0 {
		return nil
	}
	var b struct{}
	return decodeObject(body, &b)
}

// respondBody is the JSON form of AcpRespondPermissionRequest without the
// session and request IDs, which come from the URL.
type respondBody struct {
	OptionID *string `json:"optionId"`
}

// decodeRespond decodes and checks the body of POST
// .../permissions/{requestId}: {"optionId": "..."}, 1 to maxOptionID bytes.
// Whether the option is on offer is the session service's to say
// (invalid_permission_option). It returns the option ID.
func decodeRespond(body []byte) (string, error) {
	var b respondBody
	if err := decodeObject(body, &b); err != nil {
		return "", err
	}
	if b.OptionID == nil {
		return "", events.Errorf(events.CodeInvalidRequest, "optionId is required")
	}
	if *b.OptionID == "" || len(*b.OptionID) > maxOptionID {
		return "", events.Errorf(events.CodeInvalidRequest, "optionId must be 1 to %d bytes", maxOptionID)
	}
	return *b.OptionID, nil
}

// configValueBody is the JSON form of AcpSetSessionConfigOptionRequest
// without the session and config IDs, which come from the URL.
type configValueBody struct {
	Value json.RawMessage `json:"value"`
}

// decodeSetConfig decodes and checks the body of PUT
// .../config/{configId}: {"value": V}, V exactly one JSON string (valid
// UTF-8) or boolean. Whether the agent accepts it is the agent's to say
// (adapter_error). It returns V as the client sent it.
func decodeSetConfig(body []byte) (events.JSON, error) {
	var b configValueBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	if !present(b.Value) {
		return nil, events.Errorf(events.CodeInvalidRequest, "value is required")
	}
	raw := bytes.TrimSpace(b.Value)
	switch {
	case bytes.Equal(raw, []byte("true")), bytes.Equal(raw, []byte("false")):
	case len(raw) > 0 && raw[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil || !utf8.Valid(raw) {
			return nil, events.Errorf(events.CodeInvalidRequest, "value must be a string of valid UTF-8")
		}
	default:
		return nil, events.Errorf(events.CodeInvalidRequest, "value must be a string or a boolean")
	}
	return events.JSON(raw), nil
}

// single returns the only value of key in q, or false when key is absent.
// A repeated key is an error: which one would win is not obvious.
func single(q url.Values, key string) (string, bool, error) {
	vs, ok := q[key]
	if !ok {
		return "", false, nil
	}
	if len(vs) != 1 {
		return "", false, events.Errorf(events.CodeInvalidRequest, "query parameter %s is repeated", key)
	}
	return vs[0], true, nil
}

// onlyKeys rejects query parameters other than allowed.
func onlyKeys(q url.Values, allowed ...string) error {
	for k := range q {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		if !known {
			return events.Errorf(events.CodeInvalidRequest, "unknown query parameter %q", truncate(k, 40))
		}
	}
	return nil
}

// parseSeq parses a sequence: decimal digits only, no sign, no spaces.
func parseSeq(name, s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, events.Errorf(events.CodeInvalidCursor, "%s must be a sequence number, got %q", name, truncate(s, 40))
	}
	return n, nil
}

// parseHistoryQuery parses ?after=N|before=N&limit=N. It leaves SessionID
// unset.
func parseHistoryQuery(q url.Values) (*events.AcpReadHistoryRequest, error) {
	if err := onlyKeys(q, "after", "before", "limit"); err != nil {
		return nil, err
	}
	req := &events.AcpReadHistoryRequest{}
	for _, c := range []struct {
		name string
		dst  **uint64
	}{{"after", &req.After}, {"before", &req.Before}} {
		s, ok, err := single(q, c.name)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		n, err := parseSeq(c.name, s)
		if err != nil {
			return nil, err
		}
		*c.dst = &n
	}
	if req.After != nil && req.Before != nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "after and before are mutually exclusive")
	}
	s, ok, err := single(q, "limit")
	if err != nil {
		return nil, err
	}
	if ok {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 0 {
			return nil, events.Errorf(events.CodeInvalidRequest, "limit must be an integer in [1, %d], got %q", uint64(1<<32-1), truncate(s, 40))
		}
		limit := uint32(n)
		req.Limit = &limit
	}
	return req, nil
}

// parseStreamCursor returns the sequence an event stream resumes after:
// the Last-Event-ID header when the client sends one (a reconnecting
// EventSource does, and its URL still holds the first ?after), else
// ?after, else 0 (from the start).
func parseStreamCursor(h http.Header, q url.Values) (uint64, error) {
	if err := onlyKeys(q, "after"); err != nil {
		return 0, err
	}
	after, hasAfter, err := single(q, "after")
	if err != nil {
		return 0, err
	}
	if id := h.Get("Last-Event-ID"); id != "" {
		return parseSeq("Last-Event-ID", id)
	}
	if hasAfter {
		return parseSeq("after", after)
	}
	return 0, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s…", s[:n])
}
