package session_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/client/turnwait"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// ioScript writes a session's ACP_IO by hand, as the runner would after
// faults: the test agent is paused inside a turn, so its runner writes
// nothing more, and the test publishes the adapter process's next records
// itself, numbered after the runner's, in whatever order a test needs.
type ioScript struct {
	h       *rig
	sid     string
	acc     *events.PromptAccepted
	process string
	runner  events.RunnerID // the runner the adapter runs on
	base    uint64          // the runner's last record number
}

// scriptIO opens sid, starts a turn whose agent pauses at once, and
// returns the script of the process's records from there.
func scriptIO(t *testing.T, h *rig, sid string) *ioScript {
	t.Helper()
	ctx := t.Context()
	if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	acc, err := h.accept(ctx, sid, "", "pause "+sid+"\nsay never")
	if err != nil {
		t.Fatal(err)
	}
	if err := testagent.WaitPaused(ctx, h.control, sid); err != nil {
		t.Fatal(err)
	}
	att, err := h.lastAttached(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	s := &ioScript{h: h, sid: sid, acc: acc, process: att.ProcessID, runner: events.RunnerID(att.RunnerID)}
	last, err := eventlog.Last(ctx, h.js, events.StreamIO, events.IOSubject("default", events.SessionID(sid), s.runner))
	if err != nil {
		t.Fatal(err)
	}
	if last != nil && last.Header.Get(events.HeaderProcessID) == s.process {
		if s.base, err = strconv.ParseUint(last.Header.Get(events.HeaderRecordNo), 10, 64); err != nil {
			t.Fatalf("the runner's last record has no number: %v", err)
		}
	}
	return s
}

// no is the record number of the script's record i (from 1).
func (s *ioScript) no(i uint64) uint64 { return s.base + i }

// publish stores the script's record i, v, in ACP_IO (every publish is
// stored, even of a number stored before: as a retry after the duplicate
// window).
func (s *ioScript) publish(t *testing.T, i uint64, v events.Variant) {
	t.Helper()
	s.publishAs(t, s.runner, i, v)
}

// publishAs is publish on the subject of runner's records.
func (s *ioScript) publishAs(t *testing.T, runner events.RunnerID, i uint64, v events.Variant) {
	t.Helper()
	data, err := events.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: events.IOSubject("default", events.SessionID(s.sid), runner), Data: data, Header: nats.Header{
		events.HeaderRecord:    []string{v.VariantName()},
		events.HeaderProcessID: []string{s.process},
		events.HeaderRecordNo:  []string{strconv.FormatUint(s.no(i), 10)},
	}}
	if _, err := s.h.js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
}

// unrepublished stores the script's record i, v, with ACP_IO's RePublish
// off, as when the owner's connection is down: its republish never comes.
func (s *ioScript) unrepublished(t *testing.T, i uint64, v events.Variant) {
	t.Helper()
	ctx := t.Context()
	str, err := s.h.js.Stream(ctx, events.StreamIO)
	if err != nil {
		t.Fatal(err)
	}
	cfg := str.CachedInfo().Config
	republish := cfg.RePublish
	cfg.RePublish = nil
	if _, err := s.h.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	s.publish(t, i, v)
	cfg.RePublish = republish
	if _, err := s.h.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// end is the record that answers the turn's session/prompt.
func (s *ioScript) end() *events.AdapterPromptResult {
	return &events.AdapterPromptResult{TurnID: s.acc.TurnID, StopReason: "end_turn"}
}

// await waits on the log for the turn's end.
func (s *ioScript) await(t *testing.T) *events.TurnFinished {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testutil.PollTimeout)
	defer cancel()
	f, err := turnwait.Await(ctx, s.h.js, "default", events.SessionID(s.sid), s.acc)
	if err != nil {
		t.Fatalf("await the turn: %v", err)
	}
	return f
}

func chunk(kind, text string) *events.AdapterUpdate {
	return &events.AdapterUpdate{Update: events.JSON(`{"sessionUpdate":"` + kind + `","content":{"type":"text","text":"` + text + `"}}`), Kind: kind}
}

func plan() *events.AdapterUpdate {
	return &events.AdapterUpdate{Update: events.JSON(`{"sessionUpdate":"plan","entries":[]}`), Kind: "plan"}
}

const (
	text    = "agent_message_chunk"
	thought = "agent_thought_chunk"
)

// Records stored out of number order (a record the runner retried after a
// fault is stored after the ones it published next) are applied in number
// order: the durable log has the updates as the adapter wrote them, and
// the turn completes, although its answer was stored before its last
// update.
func TestIORecordsAppliedInNumberOrder(t *testing.T) {
	h := startRig(t, session.Config{})
	s := scriptIO(t, h, "order")
	records := map[uint64]events.Variant{
		1: chunk(text, "one "), 2: plan(), 3: chunk(text, "three "), 4: chunk(thought, "four"), 5: chunk(text, "five"), 6: s.end(),
	}
	for _, i := range []uint64{1, 2, 4, 5, 6, 3} {
		s.publish(t, i, records[i])
	}
	f := s.await(t)
	if f.Outcome != events.OutcomeCompleted || !strings.Contains(string(f.Message), "five") {
		t.Fatalf("the turn ended %s (%v), message %s; want completed with the last message", f.Outcome, f.Error, f.Message)
	}
	h.readLog(t, "order") // audits
	want := "agent_message_chunk:one ,plan:,agent_message_chunk:three ,agent_thought_chunk:four,agent_message_chunk:five"
	if got := strings.Join(durableTexts(t, h, "order"), ","); got != want {
		t.Errorf("durable updates\n got %s\nwant %s", got, want)
	}
	if held := testutil.Metric(t, h.reg, "acp_session_io_held_records_total"); held != 3 {
		t.Errorf("records held %v, want 3 (4, 5 and 6 waited for 3)", held)
	}
}

// A runner writes only for the sessions placed on it: a record on
// another runner's subject is dropped, and counted, even when it names the
// adapter's process and the next record number (issue 31, §3: an edge
// runner's credential publishes only on its own subjects, and this is
// what stops it writing into a session that is not its). The turn takes
// the record of its own runner with that number, and ends whole.
func TestIORecordOfAnotherRunnerDropped(t *testing.T) {
	h := startRig(t, session.Config{})
	s := scriptIO(t, h, "foreign")
	s.publishAs(t, "intruder", 1, chunk(text, "forged "))
	s.publishAs(t, "intruder", 2, s.end())
	s.publish(t, 1, chunk(text, "mine"))
	s.publish(t, 2, s.end())
	f := s.await(t)
	if f.Outcome != events.OutcomeCompleted {
		t.Fatalf("the turn ended %s (%v), want completed", f.Outcome, f.Error)
	}
	h.readLog(t, "foreign") // audits
	if got := strings.Join(durableTexts(t, h, "foreign"), ","); got != "agent_message_chunk:mine" {
		t.Errorf("durable updates %s, want only its own runner's", got)
	}
	if n := testutil.Metric(t, h.reg, "acp_session_io_rejected_total", "reason", "foreign_runner"); n != 2 {
		t.Errorf("records of another runner dropped: %v, want 2", n)
	}
}

// A record stored twice (a retry after the duplicate window) is applied
// once, whether its number was applied already or is held.
func TestIODuplicateRecordAppliedOnce(t *testing.T) {
	h := startRig(t, session.Config{})
	s := scriptIO(t, h, "dup")
	s.publish(t, 1, chunk(text, "one "))
	s.publish(t, 3, chunk(thought, "three")) // held
	s.publish(t, 3, chunk(thought, "three")) // a duplicate of a held one
	s.publish(t, 2, plan())
	s.publish(t, 2, plan()) // a duplicate of an applied one
	s.publish(t, 1, chunk(text, "one "))
	s.publish(t, 4, s.end())
	if f := s.await(t); f.Outcome != events.OutcomeCompleted {
		t.Fatalf("the turn ended %s (%v), want completed", f.Outcome, f.Error)
	}
	h.readLog(t, "dup") // audits
	want := "agent_message_chunk:one ,plan:,agent_thought_chunk:three"
	if got := strings.Join(durableTexts(t, h, "dup"), ","); got != want {
		t.Errorf("durable updates\n got %s\nwant %s", got, want)
	}
	if dups := testutil.Metric(t, h.reg, "acp_session_io_duplicate_records_total"); dups != 3 {
		t.Errorf("duplicates passed over %v, want 3", dups)
	}
}

// A gap no record fills ends the wait at session.io-gap-timeout: the turn
// fails output_lost (never unavailable), naming the records that never
// came, and the loss is counted.
func TestIOGapNeverFilledFailsOutputLost(t *testing.T) {
	h := startRig(t, session.Config{IOGapTimeout: 100 * time.Millisecond})
	s := scriptIO(t, h, "gap")
	s.publish(t, 1, chunk(text, "one "))
	s.publish(t, 3, chunk(text, "three "))
	s.publish(t, 6, s.end()) // 2, 4 and 5 never come
	f := s.await(t)
	if f.Outcome != events.OutcomeFailed || f.Error == nil || events.Code(f.Error.Code) != events.CodeOutputLost {
		t.Fatalf("the turn ended %s (%+v), want failed output_lost", f.Outcome, f.Error)
	}
	missing := strconv.FormatUint(s.no(2), 10) + ", " + strconv.FormatUint(s.no(4), 10) + "-" + strconv.FormatUint(s.no(5), 10)
	if !strings.Contains(f.Error.Message, "records "+missing+" ") {
		t.Errorf("the failure says %q, want it to name records %s", f.Error.Message, missing)
	}
	if lost := testutil.Metric(t, h.reg, "acp_session_io_lost_records_total"); lost != 3 {
		t.Errorf("lost records counted %v, want 3", lost)
	}
	h.readLog(t, "gap") // audits
}

// The process's exit record ends the wait at once (the runner stores it
// after everything the process wrote, so what is missing never comes),
// well before session.io-gap-timeout: the turn fails output_lost, not
// adapter_exited, and the exit is recorded.
func TestIOExitAfterGapFailsOutputLost(t *testing.T) {
	h := startRig(t, session.Config{IOGapTimeout: time.Hour})
	s := scriptIO(t, h, "exit")
	s.publish(t, 1, chunk(text, "one "))
	s.publish(t, 3, &events.AcpAgentExitedEvent{SessionID: "exit", AgentType: "test", ProcessID: s.process, Restart: events.RestartNotAttempted})
	f := s.await(t)
	if f.Outcome != events.OutcomeFailed || f.Error == nil || events.Code(f.Error.Code) != events.CodeOutputLost ||
		!strings.Contains(f.Error.Message, "records "+strconv.FormatUint(s.no(2), 10)+" ") {
		t.Fatalf("the turn ended %s (%+v), want failed output_lost naming record %d", f.Outcome, f.Error, s.no(2))
	}
	if err := testutil.Poll(t.Context(), "the exit to be recorded", func() (bool, error) {
		n, err := h.countCtl(t.Context(), "exit", "AcpAgentExitedEvent")
		return n == 1, err
	}); err != nil {
		t.Fatal(err)
	}
	h.readLog(t, "exit") // audits
}

// The runner's end ends the wait too: with the runner gone no record comes,
// and the turn fails output_lost, naming the records it waited for.
func TestIORunnerGoneDuringGapFailsOutputLost(t *testing.T) {
	h := startRig(t, session.Config{IOGapTimeout: time.Hour})
	s := scriptIO(t, h, "gone")
	s.publish(t, 1, chunk(text, "one "))
	s.publish(t, 3, chunk(text, "three "))
	if err := testutil.Poll(t.Context(), "record 3 to be held", func() (bool, error) {
		return testutil.Metric(t, h.reg, "acp_session_io_held_records_total") == 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	h.stopRunner()
	f := s.await(t)
	if f.Outcome != events.OutcomeFailed || f.Error == nil || events.Code(f.Error.Code) != events.CodeOutputLost ||
		!strings.Contains(f.Error.Message, "records "+strconv.FormatUint(s.no(2), 10)+" ") {
		t.Fatalf("the turn ended %s (%+v), want failed output_lost naming record %d", f.Outcome, f.Error, s.no(2))
	}
	h.readLog(t, "gone") // audits
}

// The turn's last record (its answer) is stored while its republish never
// reaches the owner (here ACP_IO republishes nothing while it is stored,
// as when the owner's connection is down): nothing follows it to reveal
// the gap, and the sweep's look at where ACP_IO ends finds it. The turn
// ends.
func TestIOMissedRepublishOfLastRecord(t *testing.T) {
	h := startRig(t, session.Config{SweepInterval: 20 * time.Millisecond})
	s := scriptIO(t, h, "miss")
	s.publish(t, 1, chunk(text, "one "))
	s.unrepublished(t, 2, s.end())
	if f := s.await(t); f.Outcome != events.OutcomeCompleted || !strings.Contains(string(f.Message), "one") {
		t.Fatalf("the turn ended %s (%v), message %s; want completed", f.Outcome, f.Error, f.Message)
	}
	if misses := testutil.Metric(t, h.reg, "acp_session_io_tail_misses_total"); misses < 1 {
		t.Errorf("tail misses %v, want the answer found by the tail check", misses)
	}
	h.readLog(t, "miss") // audits
}

// A record whose republish was lost in the middle of a turn is read back
// from ACP_IO when the next record names it as its predecessor
// (Nats-Last-Sequence): the owner's live tail is package tail's, and this
// is its gap fill.
func TestIOMissedRepublishIsReadBack(t *testing.T) {
	h := startRig(t, session.Config{})
	s := scriptIO(t, h, "gap")
	s.publish(t, 1, chunk(text, "one "))
	s.unrepublished(t, 2, chunk(text, "two "))
	s.publish(t, 3, chunk(text, "three"))
	s.publish(t, 4, s.end())
	f := s.await(t)
	if f.Outcome != events.OutcomeCompleted || !strings.Contains(string(f.Message), "one two three") {
		t.Fatalf("the turn ended %s (%v), message %s; want completed with every chunk", f.Outcome, f.Error, f.Message)
	}
	if gap := testutil.Metric(t, h.reg, "acp_session_io_gap_records_total"); gap < 1 {
		t.Errorf("gap records read back %v, want the missed chunk read from the stream", gap)
	}
	h.readLog(t, "gap") // audits
}

// An owner stops while it holds records stored out of number order (and
// the chunks of a message in progress): the next owner takes the turn over
// from the stamp on the old owner's last record, which says to read ACP_IO
// from before the held records although they were stored before the last
// record applied. Every update is durable once, in number order.
func TestTakeoverWithRecordsHeldOutOfOrder(t *testing.T) {
	for name, tc := range map[string]struct {
		before  []uint64 // published before the old owner stops, in this order
		durable string   // durable once the old owner applied what it could
		after   []uint64 // published once the next owner runs
		records func(s *ioScript) map[uint64]events.Variant
		want    string
	}{
		// 3 is held, 1 applied (and stamped) after it in the stream.
		"held record": {
			before: []uint64{3, 1}, durable: "plan:", after: []uint64{2, 4},
			records: func(s *ioScript) map[uint64]events.Variant {
				return map[uint64]events.Variant{1: plan(), 2: chunk(text, "two "), 3: chunk(text, "three "), 4: s.end()}
			},
			want: "plan:,agent_message_chunk:two three ",
		},
		// 4 is held; the thought of 2 is in the old owner's memory only,
		// stamped on the message 2 ended, which 1 began before 4 was stored.
		"held record and a message in progress": {
			before: []uint64{1, 4, 2}, durable: "agent_message_chunk:one ", after: []uint64{3, 5},
			records: func(s *ioScript) map[uint64]events.Variant {
				return map[uint64]events.Variant{1: chunk(text, "one "), 2: chunk(thought, "two"), 3: chunk(thought, "three"), 4: chunk(text, "four "), 5: s.end()}
			},
			want: "agent_message_chunk:one ,agent_thought_chunk:twothree,agent_message_chunk:four ",
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := startRig(t, session.Config{})
			ctx := t.Context()
			s := scriptIO(t, h, "tk")
			records := tc.records(s)
			for _, i := range tc.before {
				s.publish(t, i, records[i])
			}
			if err := testutil.Poll(ctx, "the old owner's durable updates", func() (bool, error) {
				return strings.Join(durableTexts(t, h, "tk"), ",") == tc.durable, nil
			}); err != nil {
				t.Fatal(err)
			}
			h.stopSvc()
			h.startSession() // adopts the session and takes the turn over
			for _, i := range tc.after {
				s.publish(t, i, records[i])
			}
			if f := s.await(t); f.Outcome != events.OutcomeCompleted {
				t.Fatalf("the turn ended %s (%v), want completed", f.Outcome, f.Error)
			}
			if n := testutil.Metric(t, h.reg, "acp_session_takeovers_total"); n != 1 {
				t.Fatalf("takeovers %v, want 1", n)
			}
			h.readLog(t, "tk") // audits: no update stored twice
			if got := strings.Join(durableTexts(t, h, "tk"), ","); got != tc.want {
				t.Errorf("durable updates\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
