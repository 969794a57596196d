package session

import (
	"context"
	"encoding/json"

	"skein.dev/pkg/events"
)

// project writes the ACP_SESSIONS projection. It is best effort: the log is
// the truth and the projection is rebuilt from it.
func (sess *session) project(ctx context.Context) {
	if sess.opened == nil {
		return
	}
	state := map[string]any{"status": sess.status()}
	if sess.turn != nil {
		state["turnId"] = sess.turn.id
		if len(sess.turn.perms) > 0 {
			requests := make([]map[string]any, len(sess.turn.perms))
			for i, p := range sess.turn.perms {
				requests[i] = map[string]any{"requestId": p.id, "request": json.RawMessage(p.request)}
			}
			state["requests"] = requests
		}
	}
	if sess.failure != nil && sess.turn == nil {
		state["error"] = map[string]string{"code": sess.failure.Code, "message": sess.failure.Message}
	}
	stateJSON, _ := json.Marshal(state)
	dirs := sess.opened.AdditionalDirectories
	if len(dirs) == 0 {
		dirs = events.JSON("[]")
	}
	m := sess.meta
	m.Namespace = string(sess.ns)
	m.PermissionPolicy = sess.opened.PermissionPolicy
	m.Info = events.AcpDurableSessionInfo{
		SessionID:             string(sess.sid),
		Agent:                 sess.opened.Agent,
		Cwd:                   sess.opened.Cwd,
		AdditionalDirectories: dirs,
		State:                 stateJSON,
		LatestSequence:        sess.w.Position().LastSeq,
		CreatedAt:             sess.createdAt.UTC().Format(events.TimestampFormat),
		UpdatedAt:             sess.updatedAt.UTC().Format(events.TimestampFormat),
	}
	data, err := events.Marshal(&m)
	if err == nil {
		_, err = sess.svc.meta.Put(ctx, events.SessionKey(sess.ns, sess.sid), data)
	}
	if err != nil {
		sess.lg.Warn("write session projection", events.LogKeyErr, err)
	}
}

// status is the session state derived from the log: waiting while a turn
// waits for permission answers, running while a turn is open, failed after
// a failed turn, idle otherwise.
func (sess *session) status() string {
	switch {
	case sess.turn != nil && len(sess.turn.perms) > 0:
		return "waiting"
	case sess.turn != nil:
		return "running"
	case sess.failure != nil:
		return "failed"
	default:
		return "idle"
	}
}
