package session

import (
	"encoding/json"
	"strings"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
	"skein.dev/pkg/events/eventlog"
)

// What an agent says cannot pass for Skein. A session update's public type
// is the agent's own sessionUpdate value (eventjson.Durable), so an
// agent that sent "permission_response" with a status "accepted" would be
// stored, and shown, as a record of the user's approval. Two rules keep
// the agent's words apart from Skein's:
//
//   - an update whose kind is one of Skein's own event types (reservedKinds)
//     is refused: it is dropped, counted (acp_session_io_rejected_total,
//     reason reserved_kind) and logged. Every kind the ACP schema defines
//     (acp.UpdateKinds) passes, and so does a kind an agent invents that
//     Skein does not use, as ACP allows;
//   - a user_message_chunk the agent sends (ACP allows it while a
//     session/load replays) is stored with the marker agentOrigin in its
//     _meta, while the user's own prompt is Skein's accepting append
//     (HeaderTurnAccepted, HeaderTurnBlock) and carries no marker. Such a
//     chunk never goes back to a replacement agent as the user's words
//     (logReader.preamble).

// reservedKinds are the public types of the seed's durable event union
// (AcpDurableEvent: AcpDurableSessionUpdate, AcpDurablePermissionRequest,
// AcpDurablePermissionResponse, each as its flat type). Only the
// permission events are shown with these types today; "session_update" is
// reserved too, so that no agent update can name the union's wrapper.
var reservedKinds = []string{
	"session_update", eventjson.TypePermissionRequest, eventjson.TypePermissionResponse, eventjson.TypeInputRequest,

	// Skein's additions to the union (inputs.go).
	eventjson.TypeInputResponse, eventjson.TypeSessionState,

	// The state changes every viewer follows (sessionstate.go).

}

// reservedKind reports whether an agent's update kind is one of Skein's
// own event types. Case is ignored, so that a client comparing types
// loosely is not fooled either; the kind is the decoded string, so an
// escaped spelling ("permission\u005fresponse") is caught as well.
func reservedKind(kind string) bool {
	if acp.KnownUpdate(kind) {
		return false
	}
	for _, r := range reservedKinds {
		if strings.EqualFold(kind, r) {
			return true
		}
	}
	return false
}

// agentOriginKey is the _meta member that marks an update the agent sent
// as the user's (user_message_chunk); its value is agentOrigin.
const (
	agentOriginKey = "skein.dev/origin"
	agentOrigin    = "agent"
)

// markAgentOrigin returns a user_message_chunk update the agent sent with
// "_meta":{"skein.dev/origin":"agent"}, the agent's other _meta members
// kept. A marker the agent wrote itself is overwritten, whatever it said.
func markAgentOrigin(update []byte) []byte {
	marker, _ := json.Marshal(agentOrigin) // a string always encodes
	meta, ok, err := acp.Member(update, "_meta")
	if err != nil {
		return update // not an object: it was refused before it got here
	}
	if !ok || !isObject(meta) {
		meta = []byte("{}")
	}
	return acp.WithMember(update, "_meta", acp.WithMember(meta, agentOriginKey, marker))
}

// isObject reports whether v, one JSON value, is an object.
func isObject(v []byte) bool {
	for _, c := range v {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '{'
	}
	return false
}

// userPrompt reports whether a stored user_message_chunk record is the
// user's own prompt: the records of Skein's accepting append carry
// HeaderTurnAccepted (the first) or HeaderTurnBlock (the others), which
// an update from the agent never does.
func userPrompt(r *eventlog.Record) bool {
	return r.Header.Get(events.HeaderTurnAccepted) != "" || r.Header.Get(events.HeaderTurnBlock) != ""
}
