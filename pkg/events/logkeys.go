package events

// Log attribute keys, declared once so that every service logs the same name
// for the same thing.
const (
	LogKeyNamespace = "ns"
	LogKeySession   = "session_id"
	// LogKeySessionKey is a session's key in ACP_SESSIONS and ACP_OWNERS (<ns>.<sid>).
	LogKeySessionKey = "session_key"
	LogKeyRunner     = "runner_id"
	LogKeyProcess    = "process_id"
	LogKeyTurn       = "turn_id"
	LogKeySubject    = "subject"
	LogKeyStream     = "stream"
	LogKeySeq        = "seq"
	LogKeyOp         = "op"
	LogKeyRecord     = "record"
	LogKeyAgent      = "agent"
	LogKeyErr        = "err"
	LogKeyCode       = "code"
)
