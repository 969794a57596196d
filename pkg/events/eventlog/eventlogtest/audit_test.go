package eventlogtest_test

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/eventlog/eventlogtest"
	"skein.dev/pkg/events/streams"
)

// rec is one record to store as is: the audit must judge logs that no
// correct writer produces, so these go to the stream without
// eventlog.Writer's checks.
type rec struct {
	kind events.LogKind
	v    events.Variant
	raw  []byte // stored instead of v's encoding when set
	// hdr adds or overrides headers; an empty value removes one.
	hdr map[string]string
}

func opened() rec {
	return rec{kind: events.LogControl, v: &events.SessionOpened{Agent: "test", PermissionPolicy: events.PolicyAllowAll}}
}

func attached() rec {
	return rec{kind: events.LogControl, v: &events.AdapterAttached{RunnerID: "r1", ProcessID: "p1", AcpSessionID: "sess_1", Tier: events.TierNew}}
}

func sessionUpdate(u string) *events.AcpDurableSessionUpdate {
	return &events.AcpDurableSessionUpdate{Update: events.JSON(u)}
}

// accept is the user message that accepts turn.
func accept(turn string) rec {
	return rec{kind: events.LogEvents,
		v:   sessionUpdate(`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"},"messageId":"user_` + turn + `"}`),
		hdr: map[string]string{events.HeaderTurnID: turn, events.HeaderTurnAccepted: "1", events.HeaderContentHash: "h"}}
}

// chunk is an agent message of turn, made from ACP_IO record io.
func chunk(turn string, io int, text string) rec {
	return rec{kind: events.LogEvents,
		v:   sessionUpdate(fmt.Sprintf(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":%q},"messageId":"msg_1"}`, text)),
		hdr: map[string]string{events.HeaderTurnID: turn, events.HeaderIOSeq: strconv.Itoa(io)}}
}

func finish(turn string) rec {
	return rec{kind: events.LogControl, v: &events.TurnFinished{TurnID: turn, Outcome: events.OutcomeCompleted, StopReason: "end_turn"},
		hdr: map[string]string{events.HeaderTurnID: turn}}
}

// with returns r with more headers.
func (r rec) with(kv ...string) rec {
	hdr := map[string]string{}
	maps.Copy(hdr, r.hdr)
	for i := 0; i+1 < len(kv); i += 2 {
		hdr[kv[i]] = kv[i+1]
	}
	r.hdr = hdr
	return r
}

// store appends recs to the log of (default, sid), numbering public events
// from 1 unless a record says otherwise.
func store(t *testing.T, js jetstream.JetStream, sid events.SessionID, recs ...rec) {
	t.Helper()
	var eventNo uint64
	for i, r := range recs {
		data := r.raw
		hdr := nats.Header{}
		if r.v != nil {
			var err error
			if data, err = events.Marshal(r.v); err != nil {
				t.Fatal(err)
			}
			hdr.Set(events.HeaderRecord, r.v.VariantName())
		}
		hdr.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s.%d", sid, i))
		if r.kind == events.LogEvents {
			eventNo++
			hdr.Set(events.HeaderEventNo, strconv.FormatUint(eventNo, 10))
		}
		for k, v := range r.hdr {
			if v == "" {
				hdr.Del(k)
			} else {
				hdr.Set(k, v)
			}
		}
		if n, err := strconv.ParseUint(hdr.Get(events.HeaderEventNo), 10, 64); err == nil {
			eventNo = n
		}
		msg := &nats.Msg{Subject: events.LogSubject("default", sid, r.kind), Header: hdr, Data: data}
		if _, err := js.PublishMsg(t.Context(), msg); err != nil {
			t.Fatalf("store record %d: %v", i, err)
		}
	}
}

func setup(t *testing.T) jetstream.JetStream {
	t.Helper()
	ns := natstest.Run(t)
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(t.Context(), js, streams.Options{}, true); err != nil {
		t.Fatal(err)
	}
	return js
}

// A log a correct writer leaves passes, with its turns grouped.
func TestAuditPassesACorrectLog(t *testing.T) {
	js := setup(t)
	store(t, js, "good",
		opened(), attached(),
		accept("t1"), chunk("t1", 5, "a"), finish("t1"),
		accept("t2"), chunk("t2", 7, "b"), chunk("t2", 8, "b"), finish("t2"),
		rec{kind: events.LogEvents, v: sessionUpdate(`{"sessionUpdate":"session_info_update","title":"x"}`)},
		accept("t3"), chunk("t3", 9, "c"), // still running
	)
	log := eventlogtest.Audit(t, js, "default", "good")
	if len(log.Records) != 12 || len(log.Events) != 8 {
		t.Errorf("Read: %d records, %d events, want 12 and 8", len(log.Records), len(log.Events))
	}
	var ids []string
	for _, turn := range log.Turns {
		ids = append(ids, turn.ID)
	}
	if !slices.Equal(ids, []string{"t1", "t2", "t3"}) {
		t.Errorf("turns %v, want t1, t2, t3", ids)
	}
	if got := log.Turns[1]; len(got.Records) != 4 || got.Finish == nil || got.Finish.TurnID != "t2" {
		t.Errorf("turn t2 = %d records, finish %+v; want 4 and its TurnFinished", len(got.Records), got.Finish)
	}
	if open := log.Open(); open == nil || open.ID != "t3" {
		t.Errorf("Open() = %+v, want t3", open)
	}
}

// Check names every broken invariant of a log.
func TestAuditCatchesBrokenLogs(t *testing.T) {
	js := setup(t)
	for _, tc := range []struct {
		name string
		recs []rec
		want string // a phrase of the problem Check must report; @n is the sequence of the test's n-th record
	}{
		{
			name: "duplicate update",
			recs: []rec{opened(), accept("t1"), chunk("t1", 5, "a"), chunk("t1", 5, "a"), finish("t1")},
			want: "store the same update of ACP_IO record 5",
		},
		{
			name: "turn without finish followed by another",
			recs: []rec{opened(), accept("t1"), chunk("t1", 5, "a"), accept("t2"), finish("t2")},
			want: "turn t1 (accepted at @2) never finished, yet turn t2 followed",
		},
		{
			name: "two finishes",
			recs: []rec{opened(), accept("t1"), finish("t1"), finish("t1")},
			want: "turn t1 finished 2 times",
		},
		{
			name: "record after finish",
			recs: []rec{opened(), accept("t1"), finish("t1"), chunk("t1", 6, "late")},
			want: "record @4 of turn t1 comes after its finish at @3",
		},
		{
			name: "record naming a finished turn after the next one",
			recs: []rec{opened(), accept("t1"), finish("t1"), accept("t2"), chunk("t1", 6, "late"), finish("t2")},
			want: "record @5 names turn t1 after its finish at @3",
		},
		{
			name: "non-contiguous eventNo",
			recs: []rec{opened(), accept("t1"), chunk("t1", 5, "a").with(events.HeaderEventNo, "3"), finish("t1")},
			want: "has eventNo 3, want 2",
		},
		{
			name: "event without a number",
			recs: []rec{opened(), accept("t1").with(events.HeaderEventNo, ""), finish("t1")},
			want: "has no event number",
		},
		{
			name: "header/variant mismatch",
			recs: []rec{opened().with(events.HeaderRecord, "TurnFinished")},
			want: `record @1 is a SessionOpened but its header says "TurnFinished"`,
		},
		{
			name: "undecodable payload",
			recs: []rec{opened(), {kind: events.LogControl, raw: []byte("not msgpack"), hdr: map[string]string{events.HeaderRecord: "SessionOpened"}}},
			want: "record @2 does not decode",
		},
		{
			name: "turn accepted twice",
			recs: []rec{opened(), accept("t1"), finish("t1"), accept("t1"), finish("t1")},
			want: "turn t1 is accepted twice",
		},
		{
			name: "record of a turn never accepted",
			recs: []rec{opened(), chunk("ghost", 5, "a")},
			want: "record @2 names turn ghost, which was never accepted",
		},
		{
			name: "finished by another turn's record",
			recs: []rec{opened(), accept("t1"), {kind: events.LogControl, v: &events.TurnFinished{TurnID: "t9", Outcome: events.OutcomeCompleted}, hdr: map[string]string{events.HeaderTurnID: "t1"}}},
			want: "turn t1 is finished by a record of turn t9",
		},
		{
			name: "accepted without a turn ID",
			recs: []rec{opened(), accept("t1").with(events.HeaderTurnID, "")},
			want: "has no turn ID",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := events.SessionID(strings.ReplaceAll(tc.name, " ", "_"))
			sid = events.SessionID(strings.NewReplacer("/", "_", "'", "").Replace(string(sid)))
			info, err := js.Stream(t.Context(), events.StreamLog)
			if err != nil {
				t.Fatal(err)
			}
			base := info.CachedInfo().State.LastSeq
			store(t, js, sid, tc.recs...)
			want := regexp.MustCompile(`@\d+`).ReplaceAllStringFunc(tc.want, func(m string) string {
				n, _ := strconv.ParseUint(m[1:], 10, 64)
				return strconv.FormatUint(base+n, 10)
			})
			log, err := eventlogtest.Read(t.Context(), js, "default", sid)
			if err != nil {
				t.Fatal(err)
			}
			problems := log.Check()
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, want) }) {
				t.Errorf("Check() = %q, want a problem containing %q", problems, want)
			}
		})
	}
}

// What a stream cannot hold (JetStream deduplicates message IDs and orders
// sequences itself) is checked on a Log built by hand.
func TestAuditCatchesWhatNoStreamHolds(t *testing.T) {
	record := func(seq uint64, msgID string) *eventlog.Record {
		data, err := events.Marshal(&events.SessionOpened{Agent: "test"})
		if err != nil {
			t.Fatal(err)
		}
		return &eventlog.Record{
			Subject: "acp.log.default.s1.ctl", Sequence: seq, Time: time.Now(), Data: data,
			Header: nats.Header{events.HeaderRecord: []string{"SessionOpened"}, jetstream.MsgIDHeader: []string{msgID}},
		}
	}
	for _, tc := range []struct {
		name string
		log  *eventlogtest.Log
		want string
	}{
		{"message ID repeated", &eventlogtest.Log{Records: []*eventlog.Record{record(1, "m"), record(2, "m")}}, "records 1 and 2 share message ID m"},
		{"sequence going back", &eventlogtest.Log{Records: []*eventlog.Record{record(5, "a"), record(3, "b")}}, "record 3 follows 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems := tc.log.Check()
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("Check() = %q, want a problem containing %q", problems, tc.want)
			}
		})
	}
	if problems := (&eventlogtest.Log{Records: []*eventlog.Record{record(1, "a"), record(4, "b")}}).Check(); len(problems) != 0 {
		t.Errorf("Check() of a correct hand-built log = %q", problems)
	}
}
