package stacktest

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/client/turnwait"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
)

// Open opens sid with agent through open_session.
func (s *Stack) Open(sid events.SessionID, agent string) {
	s.t.Helper()
	id := string(sid)
	if _, err := rpc.Call[events.AcpOpenSessionResponse](s.t.Context(), s.nc, events.APISubject(s.ns, events.OpOpenSession),
		&events.AcpOpenSessionRequest{SessionID: &id, Agent: agent}, nil); err != nil {
		s.t.Fatalf("open %s: %v", sid, err)
	}
}

// StartTurn sends script as a prompt, with the idempotency key key (nil
// for none), and returns its acceptance.
func (s *Stack) StartTurn(sid events.SessionID, key *string, script string) *events.PromptAccepted {
	s.t.Helper()
	id := string(sid)
	acc, err := rpc.Call[events.PromptAccepted](s.t.Context(), s.nc, events.APISubject(s.ns, events.OpPrompt),
		&events.AcpPromptRequest{SessionID: &id, IdempotencyKey: key, Content: TextContent(script)}, nil)
	if err != nil {
		s.t.Fatalf("prompt %s: %v", sid, err)
	}
	return acc
}

// AwaitTurn waits for the TurnFinished of the turn accepted as acc.
func (s *Stack) AwaitTurn(sid events.SessionID, acc *events.PromptAccepted) *events.TurnFinished {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), time.Minute)
	defer cancel()
	f, err := turnwait.Await(ctx, s.js, s.ns, sid, acc)
	if err != nil {
		s.t.Fatalf("await turn %s: %v", acc.TurnID, err)
	}
	return f
}

// Turn runs script as one turn to its end and returns the sequences of
// the public events it stored, its accepting user message first.
func (s *Stack) Turn(sid events.SessionID, script string) []uint64 {
	s.t.Helper()
	acc := s.StartTurn(sid, nil, script)
	s.AwaitTurn(sid, acc)
	return s.EventsFrom(sid, acc.Sequence)
}

// Say runs a turn that stores one agent message per text and returns the
// sequences of its public events: the user message that started it, then
// the messages.
func (s *Stack) Say(sid events.SessionID, texts ...string) []uint64 {
	s.t.Helper()
	lines := make([]string, 0, 2*len(texts))
	for _, text := range texts {
		lines = append(lines, "message", "say "+strconv.Quote(text))
	}
	seqs := s.Turn(sid, strings.Join(lines, "\n"))
	if len(seqs) != 1+len(texts) {
		s.t.Fatalf("turn %q stored events %v, want the user message and %d messages", texts, seqs, len(texts))
	}
	return seqs
}

// EventsFrom returns the sequences of sid's public events from seq on
// (from 1: all of them).
func (s *Stack) EventsFrom(sid events.SessionID, seq uint64) []uint64 {
	s.t.Helper()
	var seqs []uint64
	for rec, err := range eventlog.Replay(s.t.Context(), s.js, events.StreamLog, events.LogSubject(s.ns, sid, events.LogEvents), seq-1) {
		if err != nil {
			s.t.Fatalf("read the log of %s: %v", sid, err)
		}
		seqs = append(seqs, rec.Sequence)
	}
	return seqs
}

// Last returns the sequence of sid's newest record of any kind.
func (s *Stack) Last(sid events.SessionID) uint64 {
	s.t.Helper()
	rec, err := eventlog.Last(s.t.Context(), s.js, events.StreamLog, events.LogFilter(s.ns, sid))
	if err != nil || rec == nil {
		s.t.Fatalf("the last record of %s: %v, %v", sid, rec, err)
	}
	return rec.Sequence
}

// Meta returns sid's ACP_SESSIONS projection as the session service
// wrote it.
func (s *Stack) Meta(sid events.SessionID) *events.SessionMeta {
	s.t.Helper()
	kv, err := s.js.KeyValue(s.t.Context(), events.BucketSessions)
	if err != nil {
		s.t.Fatal(err)
	}
	e, err := kv.Get(s.t.Context(), events.SessionKey(s.ns, sid))
	if err != nil {
		s.t.Fatalf("the projection of %s: %v", sid, err)
	}
	m, err := events.Decode[events.SessionMeta](e.Value())
	if err != nil {
		s.t.Fatal(err)
	}
	return m
}

// State returns sid's projected state: idle, running or waiting.
func (s *Stack) State(sid events.SessionID) *events.SessionState {
	s.t.Helper()
	st, err := events.ParseSessionState(s.Meta(sid).Info.State)
	if err != nil {
		s.t.Fatalf("state of %s: %v", sid, err)
	}
	return st
}

// Exists reports whether the session service keeps a projection of sid.
func (s *Stack) Exists(sid events.SessionID) bool {
	s.t.Helper()
	kv, err := s.js.KeyValue(s.t.Context(), events.BucketSessions)
	if err != nil {
		s.t.Fatal(err)
	}
	_, err = kv.Get(s.t.Context(), events.SessionKey(s.ns, sid))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		s.t.Fatalf("the projection of %s: %v", sid, err)
	}
	return err == nil
}

// Unloaded reports whether sid's adapter was unloaded after it was last
// attached, as the session's lifecycle records say.
func (s *Stack) Unloaded(sid events.SessionID) bool {
	s.t.Helper()
	var last string
	for rec, err := range eventlog.Replay(s.t.Context(), s.js, events.StreamLog, events.LogSubject(s.ns, sid, events.LogControl), 0) {
		if err != nil {
			s.t.Fatalf("read the log of %s: %v", sid, err)
		}
		switch r := rec.Header.Get(events.HeaderRecord); r {
		case events.RecordAdapterAttached, events.RecordSessionUnloaded:
			last = r
		}
	}
	return last == events.RecordSessionUnloaded
}

// TextContent is a prompt's content: one text block.
func TextContent(text string) events.JSON {
	b, err := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	if err != nil {
		panic(err) // a map of strings always encodes
	}
	return events.JSON(b)
}
