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
// It fails (ErrMalformed) unless update is a JSON object whose
// sessionUpdate is a string and whose messageId, if present, is a string
// or null; sessionUpdate and messageId must not repeat. Member names are
// exact (case-sensitive); other members are not looked at.
func ParseUpdate(update json.RawMessage) (*Update, error) {
	var kind, msgID []byte
	if err := Lookup(update, Field{Name: "sessionUpdate", Value: &kind}, Field{Name: "messageId", Value: &msgID}); err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	u, err := updateOf(update, kind, msgID)
	if err != nil {
		return nil, err
	}
	return &u, nil
}

// ParseUpdateParams reads the routing view of the params of a
// session/update notification: its sessionId, and its update as
// ParseUpdate reads it. It reads params once, the update included. It
// fails (ErrMalformed) unless params is a JSON object whose sessionId is
// a string and whose update is an object that ParseUpdate accepts;
// sessionId and update must not repeat. Other members are not looked at.
func ParseUpdateParams(params json.RawMessage) (sessionID string, u Update, err error) {
	return parseUpdateParams(params, false)
}

// ParseValidUpdateParams is ParseUpdateParams for params known to be
// valid JSON, such as the params of a message that acpwire.Parse
// accepted: it reads them with LookupValid, which does not validate them
// again. On valid JSON its result is ParseUpdateParams's.
func ParseValidUpdateParams(params json.RawMessage) (sessionID string, u Update, err error) {
	return parseUpdateParams(params, true)
}

// parseUpdateParams is ParseValidUpdateParams when valid, else
// ParseUpdateParams. (A bool and not the reader as a func value: an
// indirect call would move every variable below to the heap.)
func parseUpdateParams(params []byte, valid bool) (sessionID string, u Update, err error) {
	var sid, update, kind, msgID []byte
	inUpdate := [...]Field{{Name: "sessionUpdate", Value: &kind}, {Name: "messageId", Value: &msgID}}
	fields := [...]Field{{Name: "sessionId", Value: &sid}, {Name: "update", Value: &update, Fields: inUpdate[:]}}
	if valid {
		err = LookupValid(params, fields[:]...)
	} else {
		err = Lookup(params, fields[:]...)
	}
	if err != nil {
		return "", Update{}, err
	}
	sessionID, ok := StringValue(sid)
	if !ok {
		return "", Update{}, malformed("sessionId is %s, want a string", describe(sid))
	}
	if len(update) == 0 || update[0] != '{' {
		return "", Update{}, malformed("update is %s, want an object", describe(update))
	}
	u, err = updateOf(update, kind, msgID)
	return sessionID, u, err
}

// updateOf checks and decodes the routing members of the update object
// update: the raw values of its sessionUpdate and messageId.
func updateOf(update, kind, msgID []byte) (Update, error) {
	k, ok := StringValue(kind)
	if !ok {
		return Update{}, malformed("update: sessionUpdate is %s, want a string", describe(kind))
	}
	u := Update{Kind: k, Raw: update}
	if msgID != nil && string(msgID) != "null" {
		id, ok := StringValue(msgID)
		if !ok {
			return Update{}, malformed("update: messageId is %s, want a string or null", describe(msgID))
		}
		u.MessageID = &id
	}
	return u, nil
}

// SessionInfoTitle returns the title a session_info_update sets: its
// "title" member when that is a JSON string. A title that is null (the
// schema's "clear"), absent, or of another type sets nothing (ok false),
// as does an update that is not a JSON object or repeats "title".
func SessionInfoTitle(update json.RawMessage) (title string, ok bool) {
	v, found, err := Member(update, "title")
	if err != nil || !found {
		return "", false
	}
	return StringValue(v)
}

// PermissionOption is one choice offered in a permission request. Choose by
// Kind (a Permission constant, or an unknown value), answer with OptionID.
type PermissionOption struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"` // for display; "" when the agent omitted it
	Kind     string `json:"kind"`
	// Raw is the option object as given, a sub-slice of the request.
	Raw json.RawMessage `json:"-"`
}

// PermissionOptions reads the options of a session/request_permission's
// params. It fails (ErrMalformed) unless request is a JSON object whose
// options, if present and not null, is an array of options that
// ParsePermissionOption accepts; options must not repeat. Without options
// the list is empty (not nil).
func PermissionOptions(request json.RawMessage) ([]PermissionOption, error) {
	var options []byte
	if err := Lookup(request, Field{Name: "options", Value: &options}); err != nil {
		return nil, fmt.Errorf("permission request: %w", err)
	}
	out := []PermissionOption{}
	if options == nil || string(options) == "null" {
		return out, nil
	}
	err := Elements(options, func(v []byte) error {
		o, err := ParsePermissionOption(v)
		if err != nil {
			return err
		}
		out = append(out, o)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("permission request: options: %w", err)
	}
	return out, nil
}

// ParsePermissionOption reads one option of a permission request. It
// fails (ErrMalformed) unless option is a JSON object with a string
// optionId and a string kind; name may be absent (it is only shown to
// people) but is a string otherwise, as the schema has it. None of the
// three may repeat. Other members are kept in Raw, not looked at.
func ParsePermissionOption(option json.RawMessage) (PermissionOption, error) {
	var id, name, kind []byte
	err := Lookup(option, Field{Name: "optionId", Value: &id}, Field{Name: "name", Value: &name}, Field{Name: "kind", Value: &kind})
	if err != nil {
		return PermissionOption{}, fmt.Errorf("an option: %w", err)
	}
	o := PermissionOption{Raw: option}
	var ok bool
	if o.OptionID, ok = StringValue(id); !ok {
		return PermissionOption{}, malformed("optionId is %s, want a string", describe(id))
	}
	if o.Kind, ok = StringValue(kind); !ok {
		return PermissionOption{}, malformed("option kind is %s, want a string", describe(kind))
	}
	if name != nil {
		if o.Name, ok = StringValue(name); !ok {
			return PermissionOption{}, malformed("option name is %s, want a string", describe(name))
		}
	}
	return o, nil
}

// PermissionCancelled is the outcome that answers a permission request
// after session/cancel (or when the turn is otherwise over).
func PermissionCancelled() json.RawMessage {
	return json.RawMessage(`{"outcome":{"outcome":"cancelled"}}`)
}

// PermissionSelected is the outcome that selects the option optionID. The
// ID is written as a JSON string without HTML escapes, as agents sent it.
func PermissionSelected(optionID string) json.RawMessage {
	b := append([]byte(`{"outcome":{"outcome":"selected","optionId":`), appendQuoted(nil, optionID)...)
	return append(b, "}}"...)
}

// ContentText returns the text of an update whose content is a text block:
// its content member is an object whose type is "text" and whose text is
// a string. Anything else, a repeated member or JSON that is not valid
// included, has no text (ok false). Member names are exact. It reads the
// update once, its content in the same pass, where decoding the update
// (encoding/json) cost a reflective decode of every chunk of every
// message.
func ContentText(update json.RawMessage) (text string, ok bool) {
	var content, typ, txt []byte
	err := Lookup(update, Field{Name: "content", Value: &content, Fields: []Field{
		{Name: "type", Value: &typ}, {Name: "text", Value: &txt},
	}})
	if err != nil || content == nil || content[0] != '{' {
		return "", false
	}
	if t, ok := StringValue(typ); !ok || t != "text" {
		return "", false
	}
	return StringValue(txt)
}
