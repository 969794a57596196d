package session

import (
	"bytes"
	"encoding/json"

	"skein.dev/pkg/events"
)

// normalizeOpen validates an open request and applies the defaults, giving
// the immutable options recorded in SessionOpened.
func (s *Service) normalizeOpen(req *events.AcpOpenSessionRequest) (*events.SessionOpened, error) {
	if req.Agent == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "agent is required")
	}
	if !events.SessionID(req.Agent).Valid() {
		return nil, events.Errorf(events.CodeUnknownAgent, "agent %q is not a valid agent ID", truncate(req.Agent))
	}
	o := &events.SessionOpened{
		Agent:                  req.Agent,
		Cwd:                    s.cfg.DefaultCwd,
		PermissionPolicy:       events.PolicyAllowAll,
		AdditionalInstructions: req.AdditionalInstructions,
	}
	if req.Cwd != nil {
		if *req.Cwd == "" || (*req.Cwd)[0] != '/' {
			return nil, events.Errorf(events.CodeInvalidRequest, "cwd must be an absolute path")
		}
		o.Cwd = *req.Cwd
	}
	if req.SkipOsInstructions != nil {
		o.SkipOsInstructions = *req.SkipOsInstructions
	}
	if req.PermissionPolicy != nil {
		switch *req.PermissionPolicy {
		case events.PolicyAllowAll, events.PolicyRejectAll, events.PolicyAsk:
			o.PermissionPolicy = *req.PermissionPolicy
		default:
			return nil, events.Errorf(events.CodeInvalidRequest, "permissionPolicy must be allow_all, reject_all or ask")
		}
	}
	var err error
	if o.AdditionalDirectories, err = jsonOf(req.AdditionalDirectories, '[', "additionalDirectories"); err != nil {
		return nil, err
	}
	if len(o.AdditionalDirectories) > 0 {
		var dirs []string
		if err := json.Unmarshal(o.AdditionalDirectories, &dirs); err != nil {
			return nil, events.Errorf(events.CodeInvalidRequest, "additionalDirectories must be an array of absolute paths")
		}
		for _, d := range dirs {
			if d == "" || d[0] != '/' {
				return nil, events.Errorf(events.CodeInvalidRequest, "additionalDirectories must be an array of absolute paths")
			}
		}
	}
	if o.Env, err = jsonOf(req.Env, '{', "env"); err != nil {
		return nil, err
	}
	if len(o.Env) > 0 {
		var env map[string]string
		if err := json.Unmarshal(o.Env, &env); err != nil {
			return nil, events.Errorf(events.CodeInvalidRequest, "env must be an object of strings")
		}
	}
	if o.McpServers, err = jsonOf(req.McpServers, '[', "mcpServers"); err != nil {
		return nil, err
	}
	return o, nil
}

// jsonOf checks that raw is absent or JSON whose first token is open ('[' or
// '{'), and returns it unchanged: ACP values are kept byte for byte.
func jsonOf(raw events.JSON, open byte, name string) (events.JSON, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != open || !json.Valid(t) {
		kind := "an array"
		if open == '{' {
			kind = "an object"
		}
		return nil, events.Errorf(events.CodeInvalidRequest, "%s must be %s", name, kind)
	}
	return raw, nil
}

// validatePrompt checks prompt content: a non-empty JSON array of content
// blocks (objects with a string "type"), within the size limits. It returns
// the blocks' raw bytes.
func (s *Service) validatePrompt(content events.JSON) ([]json.RawMessage, error) {
	if len(content) > s.cfg.MaxPromptBytes {
		return nil, events.Errorf(events.CodePayloadTooLarge, "prompt is %d bytes; at most %d", len(content), s.cfg.MaxPromptBytes)
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(content, &blocks); err != nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "content must be an array of content blocks")
	}
	if len(blocks) == 0 {
		return nil, events.Errorf(events.CodeInvalidRequest, "content must not be empty")
	}
	if len(blocks) > s.cfg.MaxPromptBlocks {
		return nil, events.Errorf(events.CodePayloadTooLarge, "prompt has %d blocks; at most %d", len(blocks), s.cfg.MaxPromptBlocks)
	}
	for i, b := range blocks {
		var head struct {
			Type *string `json:"type"`
		}
		if err := json.Unmarshal(b, &head); err != nil || head.Type == nil || *head.Type == "" {
			return nil, events.Errorf(events.CodeInvalidRequest, "content[%d] must be a content block with a type", i)
		}
	}
	return blocks, nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// validateIdempotencyKey accepts 1 to 256 printable ASCII characters without
// spaces: the key travels in a NATS header.
func validateIdempotencyKey(key *string) error {
	if key == nil {
		return nil
	}
	k := *key
	if len(k) == 0 || len(k) > 256 {
		return events.Errorf(events.CodeInvalidRequest, "idempotencyKey must be 1 to 256 characters")
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return events.Errorf(events.CodeInvalidRequest, "idempotencyKey must be printable ASCII without spaces")
		}
	}
	return nil
}
