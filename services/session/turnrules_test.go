package session_test

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// Twenty identical prompts at once dispatch exactly once: with one
// idempotency key they all get the one turn's result; without a key one is
// accepted and nineteen are session_busy. A key whose turn has finished
// answers from the log, also after the session service restarts, and
// conflicts with other content.
func TestConcurrentIdenticalPromptsDispatchOnce(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	for _, sid := range []string{"keyed", "unkeyed"} {
		if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	const n = 20

	// (a) One key.
	script := "pause keyed\nsay once"
	results := make([]promptResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := h.prompt(ctx, "keyed", "k1", script)
			results[i] = promptResult{res, err}
		})
	}
	if err := testagent.WaitPaused(ctx, h.control, "keyed"); err != nil {
		t.Fatal(err)
	}
	if err := testagent.Release(ctx, h.control, "keyed"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, r := range results {
		if r.err != nil || !strings.Contains(string(r.res.Message), "once") {
			t.Fatalf("keyed prompt %d = %+v, %v", i, r.res, r.err)
		}
		if !reflect.DeepEqual(r.res, results[0].res) {
			t.Errorf("keyed prompt %d = %+v, prompt 0 got %+v", i, r.res, results[0].res)
		}
	}
	if d := h.dispatches(); d != 1 {
		t.Errorf("%v dispatches for %d keyed prompts, want 1", d, n)
	}
	log, _ := h.readLog(t, "keyed")
	if len(log.Turns) != 1 || log.Turns[0].Records[0].Header.Get(events.HeaderIdempotencyKey) != "k1" {
		t.Fatalf("keyed: %d turns, want 1 accepted with key k1", len(log.Turns))
	}

	// (b) No key: one runs, nineteen are busy at once.
	busy := make(chan promptResult, n)
	for range n {
		go func() {
			res, err := h.prompt(ctx, "unkeyed", "", "pause unkeyed\nsay one")
			busy <- promptResult{res, err}
		}()
	}
	var busyCount, other int
	for range n - 1 {
		select {
		case r := <-busy:
			if code(r.err) == events.CodeSessionBusy {
				busyCount++
			} else {
				other++
				t.Errorf("unkeyed prompt = %+v, %v, want %s", r.res, r.err, events.CodeSessionBusy)
			}
		case <-time.After(testutil.PollTimeout):
			t.Fatalf("after %d busy answers, the others wait", busyCount)
		}
	}
	if err := testagent.Release(ctx, h.control, "unkeyed"); err != nil {
		t.Fatal(err)
	}
	if r := <-busy; r.err != nil || !strings.Contains(string(r.res.Message), "one") {
		t.Errorf("the accepted unkeyed prompt = %+v, %v", r.res, r.err)
	}
	if d := h.dispatches(); d != 2 {
		t.Errorf("%v dispatches in all, want 2", d)
	}
	if log, _ := h.readLog(t, "unkeyed"); len(log.Turns) != 1 {
		t.Errorf("unkeyed: %d accepted turns, want 1", len(log.Turns))
	}

	// A keyed turn that failed keeps its error.
	if _, err := h.prompt(ctx, "keyed", "kerr", "error -32603 boom"); code(err) != events.CodeAdapterError {
		t.Fatalf("failing keyed prompt = %v, want %s", err, events.CodeAdapterError)
	}

	// Finished keys answer from the log, before and after a restart.
	check := func(when string, wantDispatches float64) {
		t.Helper()
		// The script pauses: a dispatch would hang, not pass.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res, err := h.prompt(cctx, "keyed", "k1", script)
		if err != nil || !reflect.DeepEqual(res, results[0].res) {
			t.Errorf("%s: finished key = %+v, %v, want the stored %+v", when, res, err, results[0].res)
		}
		if _, err := h.prompt(cctx, "keyed", "kerr", "error -32603 boom"); code(err) != events.CodeAdapterError {
			t.Errorf("%s: finished failed key = %v, want %s", when, err, events.CodeAdapterError)
		}
		if _, err := h.prompt(cctx, "keyed", "k1", "say other"); code(err) != events.CodeIdempotencyConflict {
			t.Errorf("%s: finished key, other content = %v, want %s", when, err, events.CodeIdempotencyConflict)
		}
		if d := h.dispatches(); d != wantDispatches {
			t.Errorf("%s: %v dispatches, want %v", when, d, wantDispatches)
		}
	}
	check("same service", 3)
	h.stopSvc()
	h.startSession()
	check("restarted service", 0)
	if log, _ := h.readLog(t, "keyed"); len(log.Turns) != 2 {
		t.Errorf("keyed: %d accepted turns, want 2", len(log.Turns))
	}
}

// A prompt whose dispatch is not acknowledged (its runner is gone, and
// answers no question about it within CallTimeout either) fails
// prompt_delivery_uncertain and is never sent again; the route drains, is
// evicted after CancelGrace, and a runner that comes back (with the same ID
// or another) serves the session again.
func TestDispatchWithoutAckIsDeliveryUncertain(t *testing.T) {
	for _, next := range []string{"r1", "r2"} {
		t.Run("then "+next, func(t *testing.T) {
			h := startRig(t, session.Config{CancelGrace: 300 * time.Millisecond, CallTimeout: 2 * time.Second})
			ctx := t.Context()
			if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
				t.Fatal(err)
			}
			h.partitionRunner()
			if _, err := h.prompt(ctx, "s1", "", "say lost"); code(err) != events.CodePromptDeliveryUncertain {
				t.Fatalf("prompt without a runner = %v, want %s", err, events.CodePromptDeliveryUncertain)
			}
			if d := h.dispatches(); d != 1 {
				t.Errorf("%v dispatches, want 1", d)
			}
			log, evs := h.readLog(t, "s1")
			if len(log.Turns) != 1 || log.Turns[0].Finish == nil || log.Turns[0].Finish.Outcome != events.OutcomeFailed ||
				log.Turns[0].Finish.Error == nil || log.Turns[0].Finish.Error.Code != string(events.CodePromptDeliveryUncertain) {
				t.Fatalf("turns %+v, want one failed with %s", log.Turns, events.CodePromptDeliveryUncertain)
			}
			if text := agentText(evs, log.Turns[0].ID); text != "" {
				t.Errorf("the undelivered turn has output %q", text)
			}
			if st := projectedState(t, h, "s1"); st.Status != "failed" || st.Error == nil || st.Error.Code != string(events.CodePromptDeliveryUncertain) {
				t.Errorf("state = %+v, want failed with %s", st, events.CodePromptDeliveryUncertain)
			}

			h.startRunner(next)
			res, err := h.prompt(ctx, "s1", "", "say back")
			if err != nil || !strings.Contains(string(res.Message), "back") {
				t.Fatalf("prompt after a runner came back = %+v, %v", res, err)
			}
			names, err := h.ctl(ctx, "s1")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range names {
				got = append(got, v.VariantName())
			}
			// The undelivered prompt's adapter is evicted after the cancel
			// grace (SessionUnloaded), unless r1 starting again first
			// cleared its old heartbeat: that is the exit of its adapters
			// (AcpAgentExitedEvent).
			want := []string{
				"SessionOpened,AdapterAttached,TurnFinished,SessionUnloaded,AdapterAttached,TurnFinished",
				"SessionOpened,AdapterAttached,TurnFinished,AcpAgentExitedEvent,AdapterAttached,TurnFinished",
			}
			if next == "r2" {
				// r1's heartbeat expires or not before r2 serves: either way
				// the session attached anew on r2.
				want = nil
			}
			if want != nil && !slices.Contains(want, strings.Join(got, ",")) {
				t.Errorf("control records %v, want %s", got, strings.Join(want, " or "))
			}
			log, evs = h.readLog(t, "s1")
			for _, turn := range log.Turns {
				if executed(evs, turn.ID, "lost") {
					t.Errorf("the undelivered prompt was replayed in turn %s", turn.ID)
				}
			}
			if d := h.dispatches(); d != 2 {
				t.Errorf("%v dispatches, want 2", d)
			}
		})
	}
}

// A turn an earlier owner accepted and never finished is closed failed
// with prompt_delivery_uncertain when the session is loaded again (by open
// or by prompt), and is never dispatched.
func TestCrashedOwnersTurnIsClosedUncertain(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	sids := []string{"by-open", "by-prompt"}
	for _, sid := range sids {
		if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	h.stopSvc()
	crashed := map[string]string{}
	for _, sid := range sids {
		pos, _, err := eventlog.LoadPosition(ctx, h.js, "default", events.SessionID(sid))
		if err != nil {
			t.Fatal(err)
		}
		w := eventlog.NewWriter(h.js, "default", events.SessionID(sid), pos, "crashed-owner")
		turnID := "crashed_" + sid
		crashed[sid] = turnID
		if _, err := w.Append(ctx, eventlog.Entry{
			Kind: events.LogEvents,
			Header: nats.Header{
				events.HeaderTurnID:       []string{turnID},
				events.HeaderTurnAccepted: []string{"1"},
				events.HeaderContentHash:  []string{"0"},
			},
			Value: &events.AcpDurableSessionUpdate{Update: events.JSON(`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"say lost"},"messageId":"user_` + turnID + `"}`)},
		}); err != nil {
			t.Fatal(err)
		}
	}
	h.startSession()
	if err := h.open(t, "by-open", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if res, err := h.prompt(ctx, "by-prompt", "", "say next"); err != nil || !strings.Contains(string(res.Message), "next") {
		t.Fatalf("prompt after the crash = %+v, %v", res, err)
	}
	if d := h.dispatches(); d != 1 {
		t.Errorf("%v dispatches, want 1 (the new prompt only)", d)
	}
	for _, sid := range sids {
		log, evs := h.readLog(t, sid)
		want := []string{events.OutcomeFailed}
		if sid == "by-prompt" {
			want = append(want, events.OutcomeCompleted)
		}
		if got := log.Outcomes(); !slices.Equal(got, want) {
			t.Fatalf("%s: outcomes %v, want %v", sid, got, want)
		}
		turn := log.Turns[0]
		if turn.ID != crashed[sid] || turn.Finish.Error == nil || turn.Finish.Error.Code != string(events.CodePromptDeliveryUncertain) {
			t.Errorf("%s: turn %s finished %+v, want %s failed with %s", sid, turn.ID, turn.Finish, crashed[sid], events.CodePromptDeliveryUncertain)
		}
		for _, tr := range log.Turns {
			if executed(evs, tr.ID, "lost") {
				t.Errorf("%s: the crashed turn's prompt was dispatched", sid)
			}
		}
	}
	if st := projectedState(t, h, "by-open"); st.Status != "failed" || st.Error == nil || st.Error.Code != string(events.CodePromptDeliveryUncertain) {
		t.Errorf("by-open state = %+v, want failed with %s", st, events.CodePromptDeliveryUncertain)
	}
}

// A client whose keyed prompt was in flight across the owner's restart
// retries it on the next owner: the retry must answer the turn's stored
// outcome (prompt_delivery_uncertain), never dispatch the prompt a second
// time.
func TestKeyedRetryAfterOwnerRestartIsNotReplayed(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	script := "pause owner\nsay replayed"
	first := h.promptAsync(ctx, "s1", "k1", script)
	if err := testagent.WaitPaused(ctx, h.control, "owner"); err != nil {
		t.Fatal(err)
	}
	h.stopSvc() // the turn stays open in the log
	// The adapter is out of the new owner's reach: it cannot take the turn
	// over (TestTakeoverContinuesTurn is that case), so it closes it.
	h.partitionRunner()
	h.startSession()
	// The prompt in flight across the restart waits on the log: it gets the
	// outcome the new owner recorded.
	if r := <-first; code(r.err) != events.CodePromptDeliveryUncertain {
		t.Fatalf("prompt in flight across the restart = %+v, %v, want %s", r.res, r.err, events.CodePromptDeliveryUncertain)
	}

	retry := h.promptAsync(ctx, "s1", "k1", script)
	var got *promptResult
	if err := testutil.Poll(ctx, "the keyed retry", func() (bool, error) {
		select {
		case r := <-retry:
			got = &r
			return true, nil
		default:
		}
		return h.dispatches() > 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	if got == nil { // dispatched again: let it finish
		if err := testagent.Release(ctx, h.control, "owner"); err != nil {
			t.Fatal(err)
		}
		r := <-retry
		got = &r
	}
	if code(got.err) != events.CodePromptDeliveryUncertain {
		t.Errorf("keyed retry = %+v, %v, want the stored %s", got.res, got.err, events.CodePromptDeliveryUncertain)
	}
	if d := h.dispatches(); d != 0 {
		t.Errorf("the keyed retry dispatched the prompt %v more time(s)", d)
	}
	log, _ := h.readLog(t, "s1")
	if len(log.Turns) != 1 {
		t.Errorf("%d accepted turns for one keyed prompt, want 1", len(log.Turns))
	}
}

// A permission request still pending when its owner stops is ended when
// the next owner closes the turn: history must not keep a request that
// nothing will ever answer.
func TestOwnerRestartEndsPendingPermission(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{PermissionPolicy: ptr(events.PolicyAsk)}); err != nil {
		t.Fatal(err)
	}
	done := h.promptAsync(ctx, "s1", "", permissionScript)
	_, req, err := h.waitPermissionRequest(ctx, "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	h.stopSvc()
	// The adapter is out of the new owner's reach: it cannot take the turn
	// over (TestTakeoverContinuesTurn is that case), so it closes it.
	h.partitionRunner()
	h.startRunner("r2") // where the reopened session attaches
	h.startSession()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{PermissionPolicy: ptr(events.PolicyAsk)}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; code(r.err) != events.CodePromptDeliveryUncertain {
		t.Errorf("the prompt in flight across the restart = %+v, %v, want %s", r.res, r.err, events.CodePromptDeliveryUncertain)
	}
	_, evs := h.readLog(t, "s1")
	resps := permissionResponses(evs, req.RequestID)
	if len(resps) != 1 || resps[0].resp.Status != events.PermissionTerminal {
		t.Errorf("permission responses for %s after the restart: %+v, want one terminal", req.RequestID, resps)
	}
	res, err := h.respondPermission(ctx, "s1", req.RequestID, "yes")
	if err != nil || res.Status != events.PermissionNotPending || res.Reason == nil || *res.Reason == events.ReasonUnknownRequest {
		t.Errorf("late respond = %+v, %v, want not_pending naming what ended it", res, err)
	}
}

// Turn caps: a message past MaxMessageBytes fails message_too_large, a turn
// whose output passes MaxTurnOutputBytes fails turn_output_too_large, and
// the service goes on serving. A message larger than a log record is split
// into several updates of one messageId whose texts join to the original.
func TestTurnCaps(t *testing.T) {
	const maxRecord = 4096
	h := startRig(t, session.Config{MaxRecordBytes: maxRecord, MaxMessageBytes: 150_000, MaxTurnOutputBytes: 300_000})
	ctx := t.Context()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		script string
		code   events.Code
	}{
		// 800 chunks "part 1 ", "part 2 ", ...: one message of about 7 kB
		// of text (about 90 kB of updates), no two pieces alike.
		{"chunks 800 part", ""},
		{"big 200000", events.CodeMessageTooLarge},
		{"say ok", ""},
		{"flood 200 2000\nsay too late", events.CodeTurnOutputTooLarge},
		{"say ok", ""},
	} {
		_, err := h.prompt(ctx, "s1", "", tc.script)
		if code(err) != tc.code {
			t.Errorf("prompt %q = %v, want %q", tc.script, err, tc.code)
		}
	}
	log, evs := h.readLog(t, "s1")
	if got, want := log.Outcomes(), []string{"completed", "failed", "completed", "failed", "completed"}; !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	for i, c := range map[int]events.Code{1: events.CodeMessageTooLarge, 3: events.CodeTurnOutputTooLarge} {
		if f := log.Turns[i].Finish; f.Error == nil || f.Error.Code != string(c) {
			t.Errorf("turn %d finished %+v, want %s", i, f.Error, c)
		}
	}
	if text := agentText(evs, log.Turns[1].ID); text != "" {
		t.Errorf("the too-large message is durable (%d bytes)", len(text))
	}
	if text := agentText(evs, log.Turns[3].ID); strings.Contains(text, "too late") {
		t.Errorf("output after the cap is durable: %q", text)
	}

	// The split message.
	original := adapterText(t, h, "s1", "part ")
	var pieces []decoded
	for _, e := range evs {
		if e.turnID == log.Turns[0].ID && e.upd != nil && e.upd.SessionUpdate == "agent_message_chunk" {
			pieces = append(pieces, e)
		}
	}
	if len(pieces) < 2 {
		t.Fatalf("a %d-byte message in %d-byte records is %d updates", len(original), maxRecord, len(pieces))
	}
	var joined strings.Builder
	for _, p := range pieces {
		v, err := events.Decode[events.AcpDurableSessionUpdate](p.rec.Data)
		if err != nil {
			t.Fatal(err)
		}
		if len(v.Update) > maxRecord {
			t.Errorf("update %d is %d bytes, over %d", p.rec.Sequence, len(v.Update), maxRecord)
		}
		if p.upd.MessageID == nil || pieces[0].upd.MessageID == nil || *p.upd.MessageID != *pieces[0].upd.MessageID {
			t.Errorf("update %d has messageId %v, want the message's", p.rec.Sequence, p.upd.MessageID)
		}
		joined.WriteString(p.upd.Content.Text)
	}
	if joined.String() != original {
		t.Errorf("the split texts join to %d bytes, want the original %d", len(joined.String()), len(original))
	}
	// A message split to fit the log is too large for the prompt's result:
	// the result has no message, and the message is only in history.
	if m := log.Turns[0].Finish.Message; len(m) != 0 {
		t.Errorf("TurnFinished.message of a split message = %d bytes, want none", len(m))
	}
}

// adapterText returns the joined text of the agent_message_chunk updates
// the adapter of sid wrote whose text starts with prefix, as the runner
// recorded them.
func adapterText(t *testing.T, h *rig, sid, prefix string) string {
	t.Helper()
	recs, err := eventlog.Forward(t.Context(), h.js, events.StreamIO, events.IOSessionSubjects("default", events.SessionID(sid)), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, r := range recs {
		v, err := events.Unmarshal(r.Data)
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range events.UpdatesOf(v) {
			var u update
			if json.Unmarshal(raw, &u) == nil && u.SessionUpdate == "agent_message_chunk" &&
				strings.HasPrefix(u.Content.Text, prefix) {
				b.WriteString(u.Content.Text)
			}
		}
	}
	return b.String()
}

// A message split over several records whose text repeats with the split's
// period (the test agent's big text repeats every 36 bytes) stores
// byte-identical pieces under one Acp-Io-Seq. The log is correct, yet the
// audit takes the pieces for one update applied twice.
func TestSplitRepeatingMessagePassesAudit(t *testing.T) {
	h := startRig(t, session.Config{MaxRecordBytes: 4096})
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(t.Context(), "s1", "", "big 10000"); err != nil {
		t.Fatal(err)
	}
	h.readLog(t, "s1") // the audit
}

// executed reports whether the agent ran "say <text>" in turn: a message
// chunk that is exactly text. (After a fallback restore the agent also
// echoes the continuation preamble, whose history quotes earlier prompts;
// that is context, not a replay.)
func executed(evs []decoded, turnID, text string) bool {
	for _, e := range evs {
		if e.turnID == turnID && e.upd != nil && e.upd.SessionUpdate == "agent_message_chunk" && e.upd.Content.Text == text {
			return true
		}
	}
	return false
}

// A runner that said goodbye (its heartbeat deleted) is known to be gone:
// its adapters' exits are recorded, and a prompt is refused before it is
// accepted (agent_unavailable), not left uncertain.
func TestPromptAfterRunnerLeft(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "left", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	h.stopRunner()
	if err := testutil.Poll(ctx, "the runner's exit to be recorded", func() (bool, error) {
		n, err := h.countCtl(ctx, "left", "AcpAgentExitedEvent")
		return n == 1, err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "left", "", "say lost"); code(err) != events.CodeAgentUnavailable {
		t.Fatalf("prompt without a runner = %v, want %s", err, events.CodeAgentUnavailable)
	}
	if d := h.dispatches(); d != 0 {
		t.Errorf("%v dispatches, want 0", d)
	}
	if log, _ := h.readLog(t, "left"); len(log.Turns) != 0 {
		t.Errorf("%d turns accepted, want none", len(log.Turns))
	}
}

// Output ACP_IO never stored fails the turn. The runner numbers the
// records of each process: here the stream refuses one record (larger than
// its MaxMsgSize), and the owner sees the gap in the numbers. It holds
// what follows, waits for the missing record (session.io-gap-timeout, short
// here), then fails the turn output_lost, naming it, with the loss
// counted; the next turn runs as usual.
func TestLostOutputFailsTurn(t *testing.T) {
	h := startRig(t, session.Config{IOGapTimeout: 100 * time.Millisecond})
	ctx := t.Context()
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "s1", "", "say warm"); err != nil {
		t.Fatal(err)
	}
	str, err := h.js.Stream(ctx, events.StreamIO)
	if err != nil {
		t.Fatal(err)
	}
	cfg := str.CachedInfo().Config
	cfg.MaxMsgSize = 4096
	if _, err := h.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	_, err = h.prompt(ctx, "s1", "", "say before\nbig 20000\nsay after")
	if code(err) != events.CodeOutputLost || !strings.Contains(err.Error(), "never reached ACP_IO") {
		t.Fatalf("prompt with a record ACP_IO refused = %v, want output_lost: never reached ACP_IO", err)
	}
	if lost := testutil.Metric(t, h.reg, "acp_session_io_lost_records_total"); lost != 1 {
		t.Errorf("lost records counted %v, want 1", lost)
	}
	if _, err := h.prompt(ctx, "s1", "", "say ok"); err != nil {
		t.Fatalf("the next turn: %v", err)
	}
	log, _ := h.readLog(t, "s1")
	if got, want := log.Outcomes(), []string{"completed", "failed", "completed"}; !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}
