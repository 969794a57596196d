package events

import (
	"bytes"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"unicode/utf8"
)

// Request validation, in one place: every service that receives a request
// (the gateway from HTTP, the session and history services from NATS)
// checks it with its Validate method, so bad input gets the same typed
// error whoever sees it first (DESIGN invariant 10). Validate changes
// nothing (defaults are the serving service's), and returns the session
// addressed: the one named, else DefaultSessionID (respondPermission must
// name one). What needs configuration or the file system (workspace roots,
// allowEnv, runners) the session service and the runner check.

// Limits shared by the services that check them: the gateway's and the
// session service's flags default to these, and the history service serves
// pages of at most MaxHistoryLimit, which is therefore the largest page any
// client (the gateway's event stream backfill included) may ask for.
const (
	// DefaultMaxPromptBytes bounds a prompt's content. The prompt travels
	// to the session service as one NATS request, which the server's
	// max_payload bounds (8 MiB on skein dev and ops/cluster), envelope
	// included: 4 MiB leaves room for both. (DESIGN's 64 MiB is more than
	// the transport carries; docs/design/departures.md.)
	DefaultMaxPromptBytes = 4 << 20
	// MaxPromptBlocks is the most content blocks a prompt may have, and the
	// default bound: a prompt's blocks are appended as one atomic batch,
	// one record each, and a batch holds at most 1,000 records (the
	// server's limit; eventlog.MaxBatch). (DESIGN's 16,384 is more.)
	MaxPromptBlocks        = 1000
	DefaultMaxPromptBlocks = MaxPromptBlocks
	// MaxIdempotencyKeyBytes bounds an idempotency key.
	MaxIdempotencyKeyBytes = 256
	// DefaultHistoryLimit is the page size of a history request that names
	// none.
	DefaultHistoryLimit = 100
	// MaxHistoryLimit is the largest history page (DESIGN "Limits": page
	// 10,000 entries). It is not configurable: a client must know what it
	// may ask for.
	MaxHistoryLimit = 10000
	// DefaultListLimit is the page size of a listSessions request that
	// names none, and MaxListLimit the largest page.
	DefaultListLimit = 50
	MaxListLimit     = 10000
	// MaxRequestIDBytes bounds a permission request ID (Skein's own:
	// "perm_" and a NUID, so the bound is generous).
	MaxRequestIDBytes = 256
	// MaxOptionIDBytes bounds a permission option ID (the agent's).
	MaxOptionIDBytes = 1024
	// MaxConfigIDBytes bounds a config option ID (the agent's).
	MaxConfigIDBytes = 256
	// MaxLabels bounds the labels of a placement or a runner, and
	// MaxLabelBytes each label's key and value.
	MaxLabels     = 16
	MaxLabelBytes = 63
)

// PromptLimits bounds a prompt's content. The zero value means the
// defaults.
type PromptLimits struct {
	MaxBytes  int // content bytes; DefaultMaxPromptBytes when 0
	MaxBlocks int // content blocks; DefaultMaxPromptBlocks when 0
}

func (l PromptLimits) withDefaults() PromptLimits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxPromptBytes
	}
	if l.MaxBlocks <= 0 {
		l.MaxBlocks = DefaultMaxPromptBlocks
	}
	return l
}

// Validate checks a prompt: its session ID, its idempotency key
// (ValidIdempotencyKey) and its content (PromptBlocks).
func (r *AcpPromptRequest) Validate(lim PromptLimits) (SessionID, error) {
	sid, err := OptionalSessionID(r.SessionID)
	if err != nil {
		return "", err
	}
	if err := ValidIdempotencyKey(r.IdempotencyKey); err != nil {
		return "", err
	}
	if _, err := PromptBlocks(r.Content, lim); err != nil {
		return "", err
	}
	return sid, nil
}

// ValidIdempotencyKey checks an optional idempotency key: absent, or 1 to
// MaxIdempotencyKeyBytes bytes of printable ASCII without spaces.
func ValidIdempotencyKey(key *string) error {
	if key == nil {
		return nil
	}
	if !printableToken(*key, MaxIdempotencyKeyBytes) {
		return Errorf(CodeInvalidRequest, "idempotencyKey must be 1 to %d bytes of printable ASCII without spaces", MaxIdempotencyKeyBytes)
	}
	return nil
}

// PromptBlocks checks a prompt's content and returns its blocks, the exact
// bytes sent: a non-empty JSON array of at most lim.MaxBlocks objects with
// a non-empty string "type", in at most lim.MaxBytes bytes (over either is
// CodePayloadTooLarge, anything else CodeInvalidRequest).
func PromptBlocks(content JSON, lim PromptLimits) ([]json.RawMessage, error) {
	lim = lim.withDefaults()
	if len(content) > lim.MaxBytes {
		return nil, Errorf(CodePayloadTooLarge, "prompt content is %d bytes, more than %d", len(content), lim.MaxBytes)
	}
	if len(bytes.TrimSpace(content)) == 0 || bytes.Equal(bytes.TrimSpace(content), []byte("null")) {
		return nil, Errorf(CodeInvalidRequest, "content is required")
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(content, &blocks); err != nil {
		return nil, Errorf(CodeInvalidRequest, "content must be an array of content blocks")
	}
	switch {
	case len(blocks) == 0:
		return nil, Errorf(CodeInvalidRequest, "content must not be empty")
	case len(blocks) > lim.MaxBlocks:
		return nil, Errorf(CodePayloadTooLarge, "content has %d blocks, more than %d", len(blocks), lim.MaxBlocks)
	}
	for i, raw := range blocks {
		var head struct {
			Type *string `json:"type"`
		}
		if !isJSONObject(raw) || json.Unmarshal(raw, &head) != nil || head.Type == nil || *head.Type == "" {
			return nil, Errorf(CodeInvalidRequest, "content[%d] must be an object with a type", i)
		}
	}
	return blocks, nil
}

// Validate checks an open request: an agent ID (of the SessionID
// alphabet, else CodeUnknownAgent) and the options' shapes: absolute
// directories, mcpServers an array of objects, a placement by runner or
// labels, not both, a budget with a cap (Budget.Validate). The agent's
// existence and the options' meaning are the session service's to check.
func (r *AcpOpenSessionRequest) Validate() (SessionID, error) {
	sid, err := OptionalSessionID(r.SessionID)
	if err != nil {
		return "", err
	}
	if r.Agent == "" {
		return "", Errorf(CodeInvalidRequest, "agent is required")
	}
	if !SessionID(r.Agent).Valid() {
		return "", Errorf(CodeUnknownAgent, "agent %q is not a valid agent ID", Truncate(r.Agent, 80))
	}
	if r.Cwd != nil && !absolutePath(*r.Cwd) {
		return "", Errorf(CodeInvalidRequest, "cwd must be an absolute path; omit it for the default")
	}
	if len(r.AdditionalDirectories) > 0 {
		var dirs []string
		if json.Unmarshal(r.AdditionalDirectories, &dirs) != nil || !isJSONArray(r.AdditionalDirectories) {
			return "", Errorf(CodeInvalidRequest, "additionalDirectories must be an array of absolute paths")
		}
		for _, d := range dirs {
			if !absolutePath(d) {
				return "", Errorf(CodeInvalidRequest, "additionalDirectories must be an array of absolute paths")
			}
		}
	}
	if len(r.Env) > 0 {
		var env map[string]string
		if json.Unmarshal(r.Env, &env) != nil || !isJSONObject(r.Env) {
			return "", Errorf(CodeInvalidRequest, "env must be an object of strings")
		}
	}
	if len(r.McpServers) > 0 {
		var servers []map[string]json.RawMessage
		if json.Unmarshal(r.McpServers, &servers) != nil || !isJSONArray(r.McpServers) {
			return "", Errorf(CodeInvalidRequest, "mcpServers must be an array of objects")
		}
		for _, s := range servers {
			if s == nil {
				return "", Errorf(CodeInvalidRequest, "mcpServers must be an array of objects")
			}
		}
	}
	if r.PermissionPolicy != nil {
		switch *r.PermissionPolicy {
		case PolicyAllowAll, PolicyRejectAll, PolicyAsk:
		default:
			return "", Errorf(CodeInvalidRequest, "permissionPolicy must be %s, %s or %s", PolicyAllowAll, PolicyRejectAll, PolicyAsk)
		}
	}
	if r.InputPolicy != nil && *r.InputPolicy != InputPolicyAsk && *r.InputPolicy != InputPolicyDecline {
		return "", Errorf(CodeInvalidRequest, "inputPolicy must be %s or %s", InputPolicyAsk, InputPolicyDecline)
	}
	if p := r.Placement; p != nil {
		switch {
		case p.Runner != nil && p.Labels != nil:
			return "", Errorf(CodeInvalidRequest, "placement names a runner or labels, not both")
		case p.Runner != nil && !RunnerID(*p.Runner).Valid():
			return "", Errorf(CodeInvalidRequest, "placement.runner %q is not a runner ID ([A-Za-z0-9_-]{1,128})", Truncate(*p.Runner, 80))
		case p.Runner == nil && len(p.Labels) == 0:
			return "", Errorf(CodeInvalidRequest, "placement must name a runner or at least one label")
		}
		if err := ValidLabels(p.Labels); err != nil {
			return "", err
		}
	}
	if r.Budget != nil && r.Budget.MaxCost == nil {
		return "", Errorf(CodeInvalidRequest, "budget.maxCost is required in a budget")
	} else if r.Budget != nil {
		if err := r.Budget.Validate(); err != nil {
			return "", err
		}
	}
	return sid, nil
}

var labelRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,63}$`)

// ValidLabels checks labels, a placement's or a runner's: at most
// MaxLabels, each key and value 1 to MaxLabelBytes letters, digits, '.',
// '_' or '-', so that "k=v,k=v" is always readable back.
func ValidLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return Errorf(CodeInvalidRequest, "%d labels, more than %d", len(labels), MaxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if !labelRE.MatchString(k) || !labelRE.MatchString(labels[k]) {
			return Errorf(CodeInvalidRequest, "label %q=%q: keys and values are 1 to %d letters, digits, '.', '_' or '-'",
				Truncate(k, 80), Truncate(labels[k], 80), MaxLabelBytes)
		}
	}
	return nil
}

// Validate checks a cancelPrompt request: its session.
func (r *AcpCancelPromptRequest) Validate() (SessionID, error) { return OptionalSessionID(r.SessionID) }

// Validate checks an unloadSession request: its session.
func (r *AcpUnloadSessionRequest) Validate() (SessionID, error) {
	return OptionalSessionID(r.SessionID)
}

// Validate checks a deleteSession request: its session.
func (r *AcpDeleteSessionRequest) Validate() (SessionID, error) {
	return OptionalSessionID(r.SessionID)
}

// Validate checks a getSession request: its session.
func (r *AcpGetDurableSessionRequest) Validate() (SessionID, error) {
	return OptionalSessionID(r.SessionID)
}

// Validate checks a getSessionConfig request: its session.
func (r *AcpGetSessionConfigRequest) Validate() (SessionID, error) {
	return OptionalSessionID(r.SessionID)
}

// Validate checks a getSessionCapabilities request: its session.
func (r *AcpGetSessionCapabilitiesRequest) Validate() (SessionID, error) {
	return OptionalSessionID(r.SessionID)
}

// Validate checks a getSessionAgentInfo request: its session.
func (r *AcpGetSessionAgentInfoRequest) Validate() (SessionID, error) {
	return OptionalSessionID(r.SessionID)
}

// Validate checks a respondPermission request, which must name its session:
// a request ID of 1 to MaxRequestIDBytes printable ASCII bytes without
// spaces, an option ID of 1 to MaxOptionIDBytes (the session says whether
// it is on offer: CodeInvalidPermissionOption).
func (r *AcpRespondPermissionRequest) Validate() (SessionID, error) {
	if r.SessionID == "" {
		return "", Errorf(CodeInvalidSessionID, "respondPermission needs a session ID")
	}
	sid, err := ParseSessionID(r.SessionID)
	if err != nil {
		return "", err
	}
	if r.RequestID == "" || r.OptionID == "" {
		return "", Errorf(CodeInvalidRequest, "requestId and optionId are required")
	}
	if !printableToken(r.RequestID, MaxRequestIDBytes) {
		return "", Errorf(CodeInvalidRequest, "requestId must be 1 to %d bytes of printable ASCII without spaces", MaxRequestIDBytes)
	}
	if len(r.OptionID) > MaxOptionIDBytes {
		return "", Errorf(CodeInvalidRequest, "optionId must be 1 to %d bytes", MaxOptionIDBytes)
	}
	return sid, nil
}

// Validate checks a setSessionConfigOption request: the config ID is 1 to
// MaxConfigIDBytes bytes of printable ASCII without spaces, and the value
// exactly one JSON string (valid UTF-8) or boolean. Whether the agent
// accepts it is the agent's to say.
func (r *AcpSetSessionConfigOptionRequest) Validate() (SessionID, error) {
	sid, err := OptionalSessionID(r.SessionID)
	if err != nil {
		return "", err
	}
	if !printableToken(r.ConfigID, MaxConfigIDBytes) {
		return "", Errorf(CodeInvalidRequest, "configId must be 1 to %d bytes of printable ASCII without spaces", MaxConfigIDBytes)
	}
	if _, err := ConfigValue(r.Value); err != nil {
		return "", err
	}
	return sid, nil
}

// ConfigValue decodes a configuration option's value, which must be what
// session/set_config_option takes: exactly one JSON string (valid UTF-8)
// or boolean. It returns a string or a bool.
func ConfigValue(value JSON) (any, error) {
	raw := bytes.TrimSpace(value)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		return nil, Errorf(CodeInvalidRequest, "value is required")
	case bytes.Equal(raw, []byte("true")):
		return true, nil
	case bytes.Equal(raw, []byte("false")):
		return false, nil
	case raw[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil || !utf8.Valid(raw) {
			return nil, Errorf(CodeInvalidRequest, "value must be a string of valid UTF-8")
		}
		return s, nil
	default:
		return nil, Errorf(CodeInvalidRequest, "value must be one JSON string or boolean")
	}
}

// Validate checks a readHistory request: at most one of before and after
// (both is CodeInvalidCursor), and a limit, when set, of 1 to
// MaxHistoryLimit. Whether a cursor names retained history is the history
// service's to say (CodeCursorExpired).
func (r *AcpReadHistoryRequest) Validate() (SessionID, error) {
	sid, err := OptionalSessionID(r.SessionID)
	if err != nil {
		return "", err
	}
	if r.Before != nil && r.After != nil {
		return "", Errorf(CodeInvalidCursor, "before and after are mutually exclusive")
	}
	if r.Limit != nil && (*r.Limit == 0 || *r.Limit > MaxHistoryLimit) {
		return "", Errorf(CodeInvalidRequest, "limit must be between 1 and %d, got %d", MaxHistoryLimit, *r.Limit)
	}
	return sid, nil
}

// Validate checks a listSessions request and returns its page size.
func (r *AcpListDurableSessionsRequest) Validate() (int, error) {
	if r.Limit == nil {
		return DefaultListLimit, nil
	}
	if *r.Limit == 0 || *r.Limit > MaxListLimit {
		return 0, Errorf(CodeInvalidRequest, "limit must be between 1 and %d, got %d", MaxListLimit, *r.Limit)
	}
	return int(*r.Limit), nil
}

// printableToken reports whether s is 1 to limit bytes of printable ASCII
// without spaces (0x21-0x7e).
func printableToken(s string, limit int) bool {
	if s == "" || len(s) > limit {
		return false
	}
	for i := range len(s) {
		if c := s[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

func absolutePath(p string) bool { return p != "" && p[0] == '/' }

func isJSONObject(raw []byte) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}

func isJSONArray(raw []byte) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '['
}
