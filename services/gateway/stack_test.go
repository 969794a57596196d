package gateway_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"skein.dev/internal/stacktest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// The gateway is tested in front of the real services: the session
// service, the history service and an adapter-runner whose agents are the
// test agent (testagent), each on its own connection to one embedded NATS
// server, as in production (stacktest). The gateway module imports them
// in its tests only; TestServicesMeetOnlyOnNATS keeps its production code
// free of them.

// testAgent is the test agent's binary, built once by TestMain.
var testAgent string

// stack is the services behind a gateway, with what only the gateway's
// tests do to them.
type stack struct {
	*stacktest.Stack
	t testing.TB
}

// startStack runs the services on srv until the test ends, with the test
// agent that TestMain built.
func startStack(t testing.TB, srv *server.Server, opts ...stacktest.Option) *stack {
	t.Helper()
	opts = append([]stacktest.Option{stacktest.WithServer(srv), stacktest.WithAgentCommand(testAgent)}, opts...)
	return &stack{Stack: stacktest.Start(t, opts...), t: t}
}

// TextChunk returns a session update of kind (agent_message_chunk,
// user_message_chunk, ...) carrying one text block, in the field order of
// the test agent's updates.
func TextChunk(kind, text string) string {
	k, _ := json.Marshal(kind) // a string always encodes
	v, _ := json.Marshal(text)
	return `{"sessionUpdate":` + string(k) + `,"content":{"type":"text","text":` + string(v) + `}}`
}

// publishDelta publishes a live delta carrying text after the durable
// sequence after, on sid's live subject, as the session service does. The
// tests use it for the deltas a live session sends only by chance: one
// that arrives after a durable event it precedes, or after a record the
// service would not name.
func (s *stack) publishDelta(sid events.SessionID, after uint64, text string) {
	s.t.Helper()
	data, err := events.Marshal(&events.AcpEphemeralSessionUpdateEvent{SessionID: string(sid), AfterSequence: after,
		Update: events.JSON(TextChunk("agent_message_chunk", text))})
	if err != nil {
		s.t.Fatal(err)
	}
	msg := nats.NewMsg(events.LiveSubject(ns, sid))
	msg.Data = data
	msg.Header.Set(events.HeaderAfterSequence, strconv.FormatUint(after, 10))
	if err := s.Conn().PublishMsg(msg); err != nil {
		s.t.Fatal(err)
	}
}

// appendCorrupt stores a public event of sid whose payload does not
// decode, as a broken writer might, and returns its sequence: every
// history read that reaches it fails (invalid_payload, which the gateway
// masks as internal). The session service must not write to sid again:
// the record is not its own.
func (s *stack) appendCorrupt(sid events.SessionID) uint64 {
	s.t.Helper()
	msg := nats.NewMsg(events.LogSubject(ns, sid, events.LogEvents))
	msg.Data = []byte("not msgpack")
	msg.Header.Set(events.HeaderRecord, events.AcpDurableSessionUpdate{}.VariantName())
	msg.Header.Set(events.HeaderEventNo, "1000")
	ack, err := s.JetStream().PublishMsg(s.t.Context(), msg)
	if err != nil {
		s.t.Fatalf("append a corrupt record to %s: %v", sid, err)
	}
	return ack.Sequence
}

// stored waits until the turn accepted at acc has stored n public events
// and returns their sequences.
func (s *stack) stored(sid events.SessionID, acc uint64, n int) []uint64 {
	s.t.Helper()
	var seqs []uint64
	testutil.Eventually(s.t, "the turn's events", func() bool {
		seqs = s.EventsFrom(sid, acc)
		return len(seqs) >= n
	})
	return seqs
}
