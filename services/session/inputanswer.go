package session

import (
	"bytes"
	"encoding/json"

	"skein.dev/pkg/events"
)

// inputResponseJSON is the elicitation response sent to the agent for
// action (events.InputAccept, InputDecline or InputCancel), with content
// (compact JSON) for accept: {"action":"accept","content":{...}},
// {"action":"decline"} or {"action":"cancel"}.
func inputResponseJSON(action string, content events.JSON) events.JSON {
	a, _ := json.Marshal(action) // a string always marshals
	b := append([]byte(`{"action":`), a...)
	if action == events.InputAccept && len(content) > 0 {
		var c bytes.Buffer
		if json.Compact(&c, content) == nil {
			b = append(b, `,"content":`...)
			b = append(b, c.Bytes()...)
		}
	}
	return append(b, '}')
}
