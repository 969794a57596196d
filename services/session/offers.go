package session

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// What the agent offers (its commands) and what it costs (its usage), and
// how long each turn took: the session keeps the newest of each in its
// ACP_SESSIONS projection, so that the history service serves them without
// starting or restoring an adapter (pkg/events/offers.go). The updates
// themselves are stored in the log first, like every other update: the
// projection follows the log, and is written as soon as a value changes,
// so that a client sees the commands of an agent that announced them right
// after it started, with no turn to end and project them.

// onOfferUpdate caches what an available_commands_update or a usage_update
// says. The update is already queued for the log; it is committed before
// the projection that shows it is written. An update that reads as nothing
// usable changes nothing (it stays in the log, as the agent sent it).
func (r *route) onOfferUpdate(ctx context.Context, kind string, update []byte) {
	sess := r.sess
	switch kind {
	case acp.UpdateAvailableCommands:
		commands, ok := parseCommands(update)
		if !ok || bytes.Equal(commands, sess.meta.AvailableCommands) {
			return
		}
		if len(commands) > events.MaxCommandsBytes {
			sess.lg.Warn("agent's command list too large to cache; the previous one stays", "bytes", len(commands))
			return
		}
		sess.meta.AvailableCommands = commands
	case acp.UpdateUsage:
		usage, ok := parseUsage(update)
		if !ok || sameUsage(usage, sess.meta.Info.Usage) {
			return
		}
		sess.meta.Info.Usage = usage
	default:
		return
	}
	if sess.commitOrFail(ctx) {
		sess.project(ctx)
	}
}

// parseCommands reads the command list of an available_commands_update:
// the items of its availableCommands array that are objects with a string
// name and a string description, each as the agent wrote it. Other items
// are left out, and a list that is not an array reads as empty, as ACP
// says for this update (x-deserialize-skip-invalid-items and
// default-on-error). ok is false when the update is not a JSON object.
func parseCommands(update []byte) (events.JSON, bool) {
	var list []byte
	if acp.Lookup(update, acp.Field{Name: "availableCommands", Value: &list}) != nil {
		return nil, false
	}
	out := []byte{'['}
	n := 0
	err := acp.Elements(list, func(item []byte) error {
		var name, description []byte
		if acp.Lookup(item, acp.Field{Name: "name", Value: &name}, acp.Field{Name: "description", Value: &description}) != nil {
			return nil
		}
		if _, ok := acp.StringValue(name); !ok {
			return nil
		}
		if _, ok := acp.StringValue(description); !ok {
			return nil
		}
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, item...)
		n++
		return nil
	})
	if err != nil {
		return events.JSON("[]"), true
	}
	return append(out, ']'), true
}

// Bounds of a usage_update's cost as it is cached: an amount is a number
// and a currency a short code ("USD", "credits"), and a cost is copied
// into every list row of the session, so anything longer is no cost.
const (
	maxAmountBytes   = 64
	maxCurrencyBytes = 64
)

// parseUsage reads a usage_update: used and size, each a JSON integer from
// 0 to 2^64-1 (ok is false without both), and cost when it is an object
// with a number amount and a string currency, within their bounds. A cost
// that is not is no cost, as ACP says (default-on-error); the agent's
// _meta in it is left out.
func parseUsage(update []byte) (*events.SessionUsage, bool) {
	var used, size, cost []byte
	if acp.Lookup(update, acp.Field{Name: "used", Value: &used}, acp.Field{Name: "size", Value: &size}, acp.Field{Name: "cost", Value: &cost}) != nil {
		return nil, false
	}
	u, ok := jsonUint(used)
	if !ok {
		return nil, false
	}
	s, ok := jsonUint(size)
	if !ok {
		return nil, false
	}
	return &events.SessionUsage{Used: u, Size: s, Cost: parseCost(cost)}, true
}

// parseCost returns {"amount":…,"currency":…} from an ACP Cost, each value
// as the agent wrote it, or nil.
func parseCost(cost []byte) events.JSON {
	var amount, currency []byte
	if len(cost) == 0 || cost[0] != '{' || acp.Lookup(cost, acp.Field{Name: "amount", Value: &amount}, acp.Field{Name: "currency", Value: &currency}) != nil {
		return nil
	}
	if len(amount) == 0 || len(amount) > maxAmountBytes || !(amount[0] == '-' || amount[0] >= '0' && amount[0] <= '9') {
		return nil
	}
	if _, ok := acp.StringValue(currency); !ok || len(currency) > maxCurrencyBytes {
		return nil
	}
	out := make([]byte, 0, len(amount)+len(currency)+25)
	out = append(out, `{"amount":`...)
	out = append(out, amount...)
	out = append(out, `,"currency":`...)
	out = append(out, currency...)
	return append(out, '}')
}

// jsonUint reads a raw JSON value (valid JSON, as Lookup hands it out) that
// is a non-negative integer without a fraction or an exponent.
func jsonUint(v []byte) (uint64, bool) {
	if len(v) == 0 || v[0] < '0' || v[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseUint(string(v), 10, 64)
	return n, err == nil
}

func sameUsage(a, b *events.SessionUsage) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Used == b.Used && a.Size == b.Size && bytes.Equal(a.Cost, b.Cost)
}

// sinceMs is the time since t in whole milliseconds, for a turn's timing.
func sinceMs(t time.Time) *uint64 {
	return new(uint64(time.Since(t).Milliseconds()))
}

// dispatched notes when the runner confirmed that the turn's prompt is on
// the agent's stdin.
func (t *turn) dispatched() {
	if !t.acceptedAt.IsZero() {
		t.timing.DispatchMs = sinceMs(t.acceptedAt)
	}
}

// firstReply notes the turn's first agent text.
func (t *turn) firstReply() {
	if !t.acceptedAt.IsZero() {
		t.timing.FirstReplyMs = sinceMs(t.acceptedAt)
	}
}

// finishTiming returns the turn's timing as it ends now, or nil for a turn
// this replica did not accept (it measured nothing of it).
func (t *turn) finishTiming() *events.TurnTiming {
	if t.acceptedAt.IsZero() {
		return nil
	}
	timing := t.timing
	timing.FinishedMs = sinceMs(t.acceptedAt)
	return &timing
}

// maxOfferSearch bounds the public events read back to rebuild the caches
// of a session whose projection was lost: an agent announces its commands
// when a session starts and reports usage every turn or so, so the newest
// of each is recent, and a rebuild must not read a long history.
const maxOfferSearch = 1000

// recoverOffers rebuilds the caches m of a session whose projection was
// lost from its log, before the log sequence before: the commands and the usage from the newest
// available_commands_update and usage_update among its last
// maxOfferSearch public events, and the last turn's timing from the
// newest timed TurnFinished among ctl, its newest control records
// (oldest first). What is not found there stays unknown until the agent
// or the next turn says it again.
func (l logReader) recoverOffers(ctx context.Context, m *events.SessionMeta, before uint64, ctl []*eventlog.Record) error {
	for _, r := range slices.Backward(ctl) {
		if f, err := events.Decode[events.TurnFinished](r.Data); err == nil && f.Timing != nil {
			m.Info.LastTurnTiming = f.Timing
			break
		}
	}
	commands, usage, err := newestOffers(ctx, l.js, events.LogSubject(l.ns, l.sid, events.LogEvents), before)
	if err != nil {
		return err
	}
	if commands != nil {
		m.AvailableCommands = commands
	}
	if usage != nil {
		m.Info.Usage = usage
	}
	return nil
}

// newestOffers reads back from before on subject, a session's public
// events, at most maxOfferSearch of them, and returns the newest commands
// and usage the agent announced there (nil where none was).
func newestOffers(ctx context.Context, js jetstream.JetStream, subject string, before uint64) (commands events.JSON, usage *events.SessionUsage, err error) {
	recs, err := eventlog.Backward(ctx, js, events.StreamLog, subject, before, maxOfferSearch)
	if err != nil {
		return nil, nil, events.Errorf(events.CodeUnavailable, "read the session's events: %v", err)
	}
	for _, r := range slices.Backward(recs) {
		if commands != nil && usage != nil {
			break
		}
		u, err := events.Decode[events.AcpDurableSessionUpdate](r.Data)
		if err != nil {
			continue
		}
		kind, _, _ := acp.Member(u.Update, "sessionUpdate")
		switch k, _ := acp.StringValue(kind); {
		case k == acp.UpdateAvailableCommands && commands == nil:
			if c, ok := parseCommands(u.Update); ok && len(c) <= events.MaxCommandsBytes {
				commands = c
			}
		case k == acp.UpdateUsage && usage == nil:
			if v, ok := parseUsage(u.Update); ok {
				usage = v
			}
		}
	}
	return commands, usage, nil
}
