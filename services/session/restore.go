package session

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// preambleHead opens the continuation preamble: the text a fallback
// restore puts before the next prompt, for an agent that lost the session.
const preambleHead = "You are continuing a Skein session whose agent could not restore its own context. " +
	"The session's recent history follows, oldest first, one ACP session update per line (JSON). " +
	"It is the authoritative record of what already happened: do not repeat actions merely because they appear below.\n\n"

// preambleEvents bounds how many of the newest events the preamble reads.
const preambleEvents = 200

// loadMeta reads the session's ACP_SESSIONS projection, which carries what
// a restore needs (the agent's private session ID) and the cached agent
// data. A missing projection is rebuilt from the log's newest
// AdapterAttached, and its caches of the agent's announcements from the
// log's newest updates (logReader.recoverOffers).
func (sess *session) loadMeta(ctx context.Context) error {
	e, err := sess.svc.meta.Get(ctx, events.SessionKey(sess.ns, sess.sid))
	switch {
	case err == nil:
		m, err := events.Decode[events.SessionMeta](e.Value())
		if err != nil {
			return err
		}
		sess.meta, sess.metaRev = *m, e.Revision()
		return nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return events.Errorf(events.CodeUnavailable, "read session metadata: %v", err)
	}
	recs, err := eventlog.Backward(ctx, sess.svc.js, events.StreamLog, events.LogSubject(sess.ns, sess.sid, events.LogControl),
		sess.w.Position().LastSeq+1, maxAttachSearch)
	if err != nil {
		return events.Errorf(events.CodeUnavailable, "read control records: %v", err)
	}
	for _, r := range slices.Backward(recs) {
		if a, err := events.Decode[events.AdapterAttached](r.Data); err == nil {
			sess.meta.AcpSessionID = a.AcpSessionID
			sess.meta.AgentCapabilities = a.AgentCapabilities
			sess.meta.AgentInfo = a.AgentInfo
			sess.meta.ConfigOptions = a.ConfigOptions
			break
		}
	}
	return sess.svc.logOf(sess.ns, sess.sid).recoverOffers(ctx, &sess.meta, sess.w.Position().LastSeq+1, recs)
}

// reapplyConfig gives a restored adapter r the config values the session
// had before the restore (cached): an agent may resume or load a session,
// or start a new one, with its defaults. Each option the agent still
// offers with another current value is set again as
// setSessionConfigOption sets it, without letting go of sess.mu. The options the agent then reports replace the cache, with a
// new revision and a ConfigChanged record when they differ from those
// AdapterAttached recorded. A value the agent refuses is logged and left as
// the agent has it. The error is for an adapter lost meanwhile (it exited,
// or the session moved to another replica): the restore failed after all.
func (r *route) reapplyConfig(ctx context.Context, cached []events.JSON) error {
	sess := r.sess
	opts := sess.meta.ConfigOptions
	for _, o := range cached {
		id, value := currentValue(o)
		want, err := events.ConfigValue(value)
		if err != nil {
			continue // nothing session/set_config_option could send
		}
		i := indexOption(opts, id)
		if i < 0 {
			continue // the agent no longer offers it
		}
		if _, have := currentValue(opts[i]); decoded(have) == want { // want is a string or a boolean: comparable
			continue // the agent has it already
		}
		next, err := sess.sendOption(ctx, id, value)
		if sess.adapter != r {
			return events.Errorf(events.CodeAdapterExited, "the adapter was lost while its config options were reapplied")
		}
		if err != nil {
			sess.lg.Warn("reapply config option after a restore", "config_id", id, events.LogKeyErr, err)
			continue
		}
		if next == nil { // set through a legacy method, which answers nothing
			next = withValue(opts, id, value)
		}
		opts = next
	}
	if slices.EqualFunc(opts, sess.meta.ConfigOptions, func(a, b events.JSON) bool { return string(a) == string(b) }) {
		return nil
	}
	if err := sess.configChanged(ctx, ioPos{}, opts); err != nil {
		if sess.adapter != r {
			return err
		}
		sess.lg.Warn("record reapplied config options", events.LogKeyErr, err)
	}
	return nil
}

// currentValue returns an option's id and current value.
func currentValue(option events.JSON) (id string, value events.JSON) {
	var o struct {
		ID           string          `json:"id"`
		CurrentValue json.RawMessage `json:"currentValue"`
	}
	_ = json.Unmarshal(option, &o)
	return o.ID, events.JSON(o.CurrentValue)
}

// decoded returns value decoded, or nil.
func decoded(value events.JSON) any {
	var v any
	_ = json.Unmarshal(value, &v)
	return v
}

// maxAttachSearch bounds the control records read back to find the last
// adapter when the projection is lost.
const maxAttachSearch = 256

// unload cancels active work as cancelPrompt does, stops the adapter and
// keeps the session; the next prompt restores it. Unloading an unloaded
// session does nothing. The caller holds sess.mu.
func (sess *session) unload(ctx context.Context, reason string) error {
	if err := sess.loadExisting(ctx); err != nil {
		return err
	}
	if len(sess.prompts.entries) > 0 {
		sess.prompts.held = true // until the next prompt sent without queue
	}
	if sess.turn != nil {
		sess.abortTurn(ctx, ioPos{}, events.OutcomeCancelled, nil)
	}
	r := sess.adapter
	if r == nil {
		return nil
	}
	sess.endLate(ctx, events.ReasonSessionUnloaded)
	r.stopAdapter(ctx)
	if _, err := sess.append(ctx, ioPos{}, eventlog.Entry{Kind: events.LogControl, Value: &events.SessionUnloaded{Reason: reason}}); err != nil {
		return err
	}
	sess.project(ctx)
	sess.lg.Info("session unloaded", "reason", reason)
	return nil
}

// reclaimReason says why the session's adapter should be unloaded at now to
// free its runner ("idle": no activity for idle; "max_age": attached for
// maxAge), or "". Never while a turn runs or an adapter drains. Activity is
// anything that reached the log (a prompt, adapter output, an answer) or an
// attach; reads never count.
// A nil route (no adapter) has nothing to unload.
func (r *route) reclaimReason(now time.Time, idle, maxAge time.Duration) string {
	if r == nil || r.sess.turn != nil || r.drain != nil || !r.sess.late.empty() {
		return ""
	}
	sess := r.sess
	if maxAge > 0 && now.Sub(r.attachedAt) >= maxAge {
		return events.UnloadMaxAge
	}
	last := sess.updatedAt
	if r.attachedAt.After(last) {
		last = r.attachedAt
	}
	if idle > 0 && now.Sub(last) >= idle {
		return events.UnloadIdle
	}
	return ""
}
