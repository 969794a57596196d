package session_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/services/session"
)

// A burst's chunks go live as one message per run of chunks with nothing
// durable between them, and each delta's afterSequence is the log's end
// once everything the adapter wrote before it was committed: the session's
// last record before the durable message the delta's chunk ends up in.
func TestBurstDeltasFollowWhatCameBefore(t *testing.T) {
	h := startRig(t, session.Config{})
	sid := "burst"
	s := scriptIO(t, h, sid)
	live, err := h.nc.SubscribeSync(events.LiveSubject("default", events.SessionID(sid)))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Unsubscribe()
	flush(t, h.nc)

	m1, m2 := "m1", "m2"
	burst := &events.AdapterUpdates{
		Updates: []events.JSON{
			chunkOf(text, "a1", m1), chunkOf(text, "a2", m1),
			plan().Update,
			chunkOf(text, "b1", m2), chunkOf(text, "b2", m2),
			chunk(thought, "t1").Update,
		},
		Kinds:      []string{text, text, "plan", text, text, thought},
		MessageIDs: []*string{&m1, &m1, nil, &m2, &m2, nil},
	}
	s.publish(t, 1, burst)
	s.publish(t, 2, s.end())
	if f := s.await(t); f.Outcome != events.OutcomeCompleted {
		t.Fatalf("the turn ended %s (%v), want completed", f.Outcome, f.Error)
	}
	want := "agent_message_chunk:a1a2,plan:,agent_message_chunk:b1b2,agent_thought_chunk:t1"
	if got := strings.Join(durableTexts(t, h, sid), ","); got != want {
		t.Fatalf("durable updates\n got %s\nwant %s", got, want)
	}

	// The live messages: the runs a1 a2, b1 b2 and t1.
	type delta struct {
		record string
		after  uint64
		texts  string
	}
	var got []delta
	for n := 0; n < 5; {
		m, err := live.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("after %d deltas: %v", n, err)
		}
		v, err := events.Unmarshal(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		ds := events.Deltas(v)
		if len(ds) == 0 {
			continue // stderr
		}
		d := delta{record: v.VariantName(), after: ds[0].AfterSequence}
		for _, e := range ds {
			d.texts += textOf(t, e.Update)
			n++
		}
		if hdr := m.Header.Get(events.HeaderAfterSequence); hdr != strconv.FormatUint(d.after, 10) {
			t.Errorf("%s header afterSequence %q, body %d", d.record, hdr, d.after)
		}
		got = append(got, d)
	}

	// Each run follows the session's last record before its message.
	log, evs := h.readLog(t, sid)
	before := func(text string) uint64 {
		var at uint64
		for _, e := range evs {
			if e.upd != nil && e.upd.Content.Text == text {
				at = e.rec.Sequence
			}
		}
		if at == 0 {
			t.Fatalf("no durable message %q", text)
		}
		var last uint64
		for _, r := range log.Records {
			if r.Sequence < at {
				last = r.Sequence
			}
		}
		return last
	}
	wantLive := []delta{
		{events.RecordEphemeralUpdates, before("a1a2"), "a1a2"},
		{events.RecordEphemeralUpdates, before("b1b2"), "b1b2"},
		{"AcpEphemeralSessionUpdateEvent", before("t1"), "t1"},
	}
	if len(got) != len(wantLive) {
		t.Fatalf("live messages %+v, want %+v", got, wantLive)
	}
	for i := range got {
		if got[i] != wantLive[i] {
			t.Errorf("live message %d = %+v, want %+v", i, got[i], wantLive[i])
		}
	}
}

// chunkOf is an agent chunk of message id.
func chunkOf(kind, text, id string) events.JSON {
	return events.JSON(`{"sessionUpdate":"` + kind + `","content":{"type":"text","text":"` + text + `"},"messageId":"` + id + `"}`)
}

// textOf is the text of a chunk.
func textOf(t *testing.T, raw events.JSON) string {
	t.Helper()
	var u update
	if err := json.Unmarshal(raw, &u); err != nil {
		t.Fatal(err)
	}
	return u.Content.Text
}
