package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"

	jsonv2 "github.com/go-json-experiment/json"

	"skein.dev/pkg/events"
)

// Request bodies are decoded strictly: one JSON object, no unknown fields,
// names matched exactly (not case-insensitively, as encoding/json does), no
// name twice in any object, valid UTF-8, nothing after it. Two spellings
// of one field, or the same field twice, would make the body mean what
// the last one says to the gateway and maybe something else to whatever
// reads it next; the body is refused instead. A field the gateway does not know is more likely a typo
// (or a feature this gateway lacks) than something safe to drop. Fields of
// schema type JsonUtf8 are kept as the exact bytes the client sent.
//
// The gateway decodes the HTTP shape (JSON, the URL, the query) into the
// protocol's request and checks it with the request's Validate method
// (package events): the same rules and codes as the session and history
// services, which check it again.

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
	if err := jsonv2.Unmarshal(trimmed, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		return events.Errorf(events.CodeInvalidRequest, "request body: %v", err)
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
	InputPolicy            *string         `json:"inputPolicy"`
	Placement              *placementBody  `json:"placement"`
	Budget                 *budgetBody     `json:"budget"`
}

// budgetBody is the JSON form of events.Budget: {"maxCost": {"amount":
// 25, "currency": "USD"}}, a null maxCost for none.
type budgetBody struct {
	MaxCost *moneyBody `json:"maxCost"`
}

// moneyBody is the JSON form of events.Money; both members are required.
type moneyBody struct {
	Amount   *float64 `json:"amount"`
	Currency *string  `json:"currency"`
}

// budget returns b as the request's budget (nil for nil), its members
// checked (events.Budget.Validate checks their values).
func (b *budgetBody) budget() (*events.Budget, error) {
	if b == nil {
		return nil, nil
	}
	out := &events.Budget{}
	if m := b.MaxCost; m != nil {
		if m.Amount == nil || m.Currency == nil {
			return nil, events.Errorf(events.CodeInvalidRequest, "budget.maxCost needs an amount (a number) and a currency")
		}
		out.MaxCost = &events.Money{Amount: *m.Amount, Currency: *m.Currency}
	}
	return out, out.Validate()
}

// placementBody is the JSON form of events.Placement.
type placementBody struct {
	Runner *string           `json:"runner"`
	Labels map[string]string `json:"labels"`
}

// decodeOpen decodes and checks the body of PUT /v1/sessions/{id} for the
// session sid. Absent and null options are left unset.
func decodeOpen(body []byte, sid events.SessionID) (*events.AcpOpenSessionRequest, error) {
	var b openBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	req := &events.AcpOpenSessionRequest{
		SessionID:              new(string(sid)),
		Agent:                  b.Agent,
		Cwd:                    b.Cwd,
		PermissionPolicy:       b.PermissionPolicy,
		SkipOsInstructions:     b.SkipOsInstructions,
		AdditionalInstructions: b.AdditionalInstructions,
		InputPolicy:            b.InputPolicy,
	}
	if present(b.AdditionalDirectories) {
		req.AdditionalDirectories = events.JSON(b.AdditionalDirectories)
	}
	if present(b.Env) {
		req.Env = events.JSON(b.Env)
	}
	if present(b.McpServers) {
		req.McpServers = events.JSON(b.McpServers)
	}
	if p := b.Placement; p != nil {
		req.Placement = &events.Placement{Runner: p.Runner, Labels: p.Labels}
	}
	var err error
	if req.Budget, err = b.Budget.budget(); err != nil {
		return nil, err
	}
	if _, err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// promptBody is the JSON form of AcpPromptRequest without its session ID.
type promptBody struct {
	IdempotencyKey *string         `json:"idempotencyKey"`
	Content        json.RawMessage `json:"content"`
	Queue          bool            `json:"queue"`
}

// decodePrompt decodes and checks the body of POST .../prompt for the
// session sid: content is a non-empty array of ACP content blocks within
// lim, each an object with a type (events.PromptBlocks). The blocks
// themselves are the agent's to interpret and pass through byte for byte.
func decodePrompt(body []byte, sid events.SessionID, lim events.PromptLimits) (*events.AcpPromptRequest, error) {
	var b promptBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	req := &events.AcpPromptRequest{SessionID: new(string(sid)), IdempotencyKey: b.IdempotencyKey, Queue: b.Queue}
	if present(b.Content) {
		req.Content = events.JSON(b.Content)
	}
	if _, err := req.Validate(lim); err != nil {
		return nil, err
	}
	return req, nil
}

// maxControlBody bounds the body of a cancel, an unload, a delete, a
// permission answer or a config value: the longest valid one, an option ID
// of events.MaxOptionIDBytes bytes written entirely as \uXXXX escapes, fits
// several times over.
const maxControlBody = 16 << 10

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
// .../permissions/{requestId} ({"optionId": "..."}) for the request
// requestID of the session sid. Whether the option is on offer is the
// session service's to say (invalid_permission_option).
func decodeRespond(body []byte, sid events.SessionID, requestID string) (*events.AcpRespondPermissionRequest, error) {
	var b respondBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	if b.OptionID == nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "optionId is required")
	}
	// respondPermission never defaults its session: the ID is always the
	// URL's, "main" included.
	req := &events.AcpRespondPermissionRequest{SessionID: string(sid), RequestID: requestID, OptionID: *b.OptionID}
	if _, err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// configValueBody is the JSON form of AcpSetSessionConfigOptionRequest
// without the session and config IDs, which come from the URL.
type configValueBody struct {
	Value json.RawMessage `json:"value"`
}

// decodeSetConfig decodes and checks the body of PUT
// .../config/{configId} ({"value": V}, V one JSON string or boolean) for
// the option configID of the session sid. V is kept as the client sent it;
// whether the agent accepts it is the agent's to say (adapter_error).
func decodeSetConfig(body []byte, sid events.SessionID, configID string) (*events.AcpSetSessionConfigOptionRequest, error) {
	var b configValueBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	req := &events.AcpSetSessionConfigOptionRequest{SessionID: new(string(sid)), ConfigID: configID}
	if present(b.Value) {
		req.Value = events.JSON(bytes.TrimSpace(b.Value))
	}
	if _, err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
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
			return events.Errorf(events.CodeInvalidRequest, "unknown query parameter %q", events.Truncate(k, 40))
		}
	}
	return nil
}

// parseSeq parses a sequence: decimal digits only, no sign, no spaces.
func parseSeq(name, s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, events.Errorf(events.CodeInvalidCursor, "%s must be a sequence number, got %q", name, events.Truncate(s, 40))
	}
	return n, nil
}

// parseHistoryQuery parses ?after=N|before=N&limit=N and checks the
// request (AcpReadHistoryRequest.Validate: both cursors is invalid_cursor,
// a limit outside [1, events.MaxHistoryLimit] invalid_request). It leaves
// SessionID unset.
func parseHistoryQuery(q url.Values) (*events.AcpReadHistoryRequest, error) {
	if err := onlyKeys(q, "after", "before", "limit", "include"); err != nil {
		return nil, err
	}
	req := &events.AcpReadHistoryRequest{}
	// include=state interleaves the session's state changes among the
	// events (events.SessionStateChange). It is the one value there is.
	if s, ok, err := single(q, "include"); err != nil {
		return nil, err
	} else if ok {
		if s != historyIncludeState {
			return nil, events.Errorf(events.CodeInvalidRequest, "include must be %q, got %q", historyIncludeState, events.Truncate(s, 40))
		}
		req.IncludeState = true
	}
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
	var err error
	if req.Limit, err = parseLimit(q, events.MaxHistoryLimit); err != nil {
		return nil, err
	}
	if _, err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// historyIncludeState is the value of the history route's include
// parameter that asks for the state changes.
const historyIncludeState = "state"

// parseLimit reads the query's limit, at most once: nil when absent, else
// an integer in [1, max].
func parseLimit(q url.Values, max uint32) (*uint32, error) {
	s, ok, err := single(q, "limit")
	if err != nil || !ok {
		return nil, err
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 || n > uint64(max) {
		return nil, events.Errorf(events.CodeInvalidRequest, "limit must be an integer in [1, %d], got %q", max, events.Truncate(s, 40))
	}
	limit := uint32(n)
	return &limit, nil
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
