package gateway

import (
	"encoding/json"
	"net/http"

	"skein.dev/pkg/events"
)

// handleCommands serves GET /v1/sessions/{id}/commands: the commands
// (ACP's slash commands and skills) of the agent's last
// available_commands_update, each as the agent wrote it, or [] when it
// announced none. The history service answers from what the session
// stored; no adapter starts or is restored.
func (g *Gateway) handleCommands(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpGetSessionCommands, 0,
		func(_ []byte, sid events.SessionID) (events.Variant, error) {
			return &events.GetSessionCommandsRequest{SessionID: new(string(sid))}, nil
		},
		func(resp *events.SessionCommandsResponse) error { return writeCommands(w, pathSession(r), resp) })
}

// writeCommands answers 200 {"commands": [...]}. Commands that are not a
// JSON array are an internal error (a service stored garbage), never a
// broken response; none at all are []. On an error it writes nothing.
func writeCommands(w http.ResponseWriter, sid events.SessionID, resp *events.SessionCommandsResponse) error {
	commands := resp.Commands
	if len(commands) == 0 {
		commands = events.JSON(`[]`)
	}
	var list []json.RawMessage
	if err := json.Unmarshal(commands, &list); err != nil {
		return events.Errorf(events.CodeInternal, "render commands of %s: not a JSON array: %v", sid, err)
	}
	b, err := json.Marshal(struct {
		Commands events.JSON `json:"commands"`
	}{commands})
	if err != nil {
		return events.Errorf(events.CodeInternal, "render commands of %s: %v", sid, err)
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// usageJSON is events.SessionUsage in JSON: a session's "usage".
type usageJSON struct {
	Used uint64      `json:"used"`
	Size uint64      `json:"size"`
	Cost events.JSON `json:"cost,omitempty"`
}

// timingJSON is events.TurnTiming in JSON: a session's "lastTurnTiming".
// An absent field was not observed; 0 is a measurement.
type timingJSON struct {
	DispatchMs   *uint64 `json:"dispatchMs,omitempty"`
	FirstReplyMs *uint64 `json:"firstReplyMs,omitempty"`
	FinishedMs   *uint64 `json:"finishedMs,omitempty"`
}

// offersJSON returns the JSON of a session's usage and last turn's timing,
// each nil when unknown.
func offersJSON(s *events.AcpDurableSessionInfo) (*usageJSON, *timingJSON) {
	var u *usageJSON
	if s.Usage != nil {
		u = &usageJSON{Used: s.Usage.Used, Size: s.Usage.Size, Cost: s.Usage.Cost}
	}
	var t *timingJSON
	if s.LastTurnTiming != nil {
		t = &timingJSON{DispatchMs: s.LastTurnTiming.DispatchMs, FirstReplyMs: s.LastTurnTiming.FirstReplyMs, FinishedMs: s.LastTurnTiming.FinishedMs}
	}
	return u, t
}
