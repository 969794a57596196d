package events

// HeaderEventBytes is, on a public event (LogEvents records only), the
// running total of the payload bytes of the session's public events up to
// and including it. The bytes a session retains are then the newest event's
// total less the oldest retained one's, plus that one's size: two reads.
// The session's writer prunes the oldest events by it, JetStream having no
// per-subject byte limit (eventlog.Retention).
const HeaderEventBytes = "Acp-Event-Bytes"
