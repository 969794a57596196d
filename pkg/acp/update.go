package acp

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every error of this package's parsers: the
// payload does not have the shape ACP gives it.
var ErrMalformed = errors.New("malformed ACP payload")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Update is the routing view of a session/update's update object. The
// update itself stays raw, so unknown variants, fields and _meta survive
// byte for byte.
type Update struct {
	// Kind is update.sessionUpdate: one of the Update constants or a value
	// this package does not know (keep it; do not fail).
	Kind string
	// MessageID is update.messageId, or nil when it is absent or null (it
	// is optional in v1; codex-acp and claude-code-acp never send it).
	MessageID *string
	// Raw is the update object as given.
	Raw json.RawMessage
}

// ParseUpdate reads the routing view of a session/update's update object.
// It fails (ErrMalformed) unless update is an object whose sessionUpdate
// is a string and whose messageId, if present, is a string or null.
func ParseUpdate(update json.RawMessage) (*Update, error) {
	var head struct {
		Kind      *string         `json:"sessionUpdate"`
		MessageID json.RawMessage `json:"messageId"`
	}
	if err := json.Unmarshal(update, &head); err != nil || head.Kind == nil {
		return nil, malformed("update is not an object with a string sessionUpdate")
	}
	u := &Update{Kind: *head.Kind, Raw: update}
	if len(head.MessageID) > 0 && string(head.MessageID) != "null" {
		var id string
		if err := json.Unmarshal(head.MessageID, &id); err != nil {
			return nil, malformed("messageId is not a string or null")
		}
		u.MessageID = &id
	}
	return u, nil
}

// PermissionOption is one choice offered in a permission request. Choose by
// Kind (a Permission constant, or an unknown value), answer with OptionID.
type PermissionOption struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
}

// PermissionOptions reads the options of a session/request_permission's
// params. It fails (ErrMalformed) unless options is an array of objects
// each with a string optionId and a string kind.
func PermissionOptions(request json.RawMessage) ([]PermissionOption, error) {
	var params struct {
		Options []struct {
			OptionID *string `json:"optionId"`
			Name     string  `json:"name"`
			Kind     *string `json:"kind"`
		} `json:"options"`
	}
	if err := json.Unmarshal(request, &params); err != nil {
		return nil, malformed("permission request: %v", err)
	}
	out := make([]PermissionOption, 0, len(params.Options))
	for _, o := range params.Options {
		if o.OptionID == nil || o.Kind == nil {
			return nil, malformed("permission request: an option without a string optionId and kind")
		}
		out = append(out, PermissionOption{OptionID: *o.OptionID, Name: o.Name, Kind: *o.Kind})
	}
	return out, nil
}

// PermissionCancelled is the outcome that answers a permission request
// after session/cancel (or when the turn is otherwise over).
func PermissionCancelled() json.RawMessage {
	return json.RawMessage(`{"outcome":{"outcome":"cancelled"}}`)
}

// PermissionSelected is the outcome that selects the option optionID.
func PermissionSelected(optionID string) json.RawMessage {
	id, _ := json.Marshal(optionID) // a string always encodes
	b := append([]byte(`{"outcome":{"outcome":"selected","optionId":`), id...)
	return append(b, "}}"...)
}
