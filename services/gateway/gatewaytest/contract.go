package gatewaytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/eventlog/eventlogtest"
)

// SessionService is a running session service for SessionContract: the
// fake one of this package, or the real one with a runner and an agent.
type SessionService struct {
	// NC reaches the service's request API (acp.api.<ns>.<op>) and
	// ACP_LOG.
	NC *nats.Conn
	// Agent names an agent whose turns end by themselves, completed.
	Agent string
}

// SessionContract holds a session service to what its clients (the
// gateway, eventlog.Prompt) rely on. The fake session service of this
// package passes it (contract_test.go); the real one must pass it too, so
// that tests against the fake say something about the real one. start
// returns a fresh service; the suite opens its own sessions in
// events.DefaultNamespace.
//
// The contract:
//   - prompt answers as soon as the turn is accepted: events.PromptAccepted
//     names the turn and the sequence of its accepting record (which
//     carries Acp-Turn-Accepted and Acp-Turn-Id), and the turn's outcome
//     is the TurnFinished of that turn in the log (eventlog.AwaitTurn);
//   - a keyed prompt's TurnFinished is on events.KeySubject; a retry with
//     the same key and content is the same turn (Finished set once it
//     ended), other content is idempotency_conflict;
//   - invalid requests get the codes of their Validate methods; a prompt
//     to a session that does not exist is session_not_found;
//   - cancel_prompt without a running turn is no_active_prompt;
//   - delete_session leaves the SessionDeleted tombstone last, is
//     idempotent, and the ID can be opened again;
//   - every log passes eventlogtest.Audit.
func SessionContract(t *testing.T, start func(t *testing.T) SessionService) {
	t.Run("prompt answers at acceptance", func(t *testing.T) {
		c := newContract(t, start)
		c.open(t, "s1")
		acc := c.prompt(t, "s1", nil, "hi")
		rec, err := eventlog.At(t.Context(), c.js, events.StreamLog, acc.Sequence)
		if err != nil || rec == nil {
			t.Fatalf("the accepting record %d: %v, %v", acc.Sequence, rec, err)
		}
		if rec.Header.Get(events.HeaderTurnAccepted) == "" || rec.Header.Get(events.HeaderTurnID) != acc.TurnID ||
			rec.Subject != events.LogSubject(events.DefaultNamespace, "s1", events.LogEvents) {
			t.Errorf("record %d = %s %v, want the acceptance of turn %s", acc.Sequence, rec.Subject, rec.Header, acc.TurnID)
		}
		f := c.await(t, "s1", acc)
		if f.Outcome != events.OutcomeCompleted {
			t.Errorf("turn %s ended %s (%v), want %s", acc.TurnID, f.Outcome, f.Error, events.OutcomeCompleted)
		}
		log := eventlogtest.Audit(t, c.js, events.DefaultNamespace, "s1")
		if len(log.Turns) != 1 || log.Turns[0].ID != acc.TurnID || log.Turns[0].Accepted != acc.Sequence {
			t.Errorf("the log has turns %+v, want turn %s accepted at %d", log.Turns, acc.TurnID, acc.Sequence)
		}
	})

	t.Run("idempotency key", func(t *testing.T) {
		c := newContract(t, start)
		c.open(t, "s1")
		key := new("contract-key")
		acc := c.prompt(t, "s1", key, "hi")
		f := c.await(t, "s1", acc)
		last, err := eventlog.Last(t.Context(), c.js, events.StreamLog, events.KeySubject(events.DefaultNamespace, "s1", *key))
		if err != nil || last == nil || last.Header.Get(events.HeaderRecord) != events.RecordTurnFinished {
			t.Fatalf("the key's subject holds %v (%v), want the TurnFinished", last, err)
		}
		again := c.prompt(t, "s1", key, "hi")
		if again.TurnID != acc.TurnID || again.Finished == nil || again.Finished.Outcome != f.Outcome {
			t.Errorf("retry = %+v, want turn %s with its finish", again, acc.TurnID)
		}
		_, err = c.call(t, &events.AcpPromptRequest{SessionID: new("s1"), IdempotencyKey: key, Content: content("other")})
		wantCode(t, "the key with other content", err, events.CodeIdempotencyConflict)
		eventlogtest.Audit(t, c.js, events.DefaultNamespace, "s1")
	})

	t.Run("invalid requests", func(t *testing.T) {
		c := newContract(t, start)
		c.open(t, "s1")
		for name, tc := range map[string]struct {
			req  *events.AcpPromptRequest
			code events.Code
		}{
			"no session":         {&events.AcpPromptRequest{SessionID: new("nobody"), Content: content("hi")}, events.CodeSessionNotFound},
			"bad session ID":     {&events.AcpPromptRequest{SessionID: new("a.b"), Content: content("hi")}, events.CodeInvalidSessionID},
			"empty content":      {&events.AcpPromptRequest{SessionID: new("s1"), Content: events.JSON(`[]`)}, events.CodeInvalidRequest},
			"block without type": {&events.AcpPromptRequest{SessionID: new("s1"), Content: events.JSON(`[{"text":"x"}]`)}, events.CodeInvalidRequest},
			"key with a space":   {&events.AcpPromptRequest{SessionID: new("s1"), IdempotencyKey: new("a b"), Content: content("hi")}, events.CodeInvalidRequest},
		} {
			_, err := c.call(t, tc.req)
			wantCode(t, name, err, tc.code)
		}
		_, err := events.Request(t.Context(), c.nc, events.APISubject(events.DefaultNamespace, events.OpOpenSession), &events.AcpOpenSessionRequest{SessionID: new("s2")}, nil)
		wantCode(t, "open without an agent", err, events.CodeInvalidRequest)
	})

	t.Run("cancel without a turn", func(t *testing.T) {
		c := newContract(t, start)
		c.open(t, "s1")
		resp, err := events.Call[events.AcpCancelPromptResponse](t.Context(), c.nc, events.APISubject(events.DefaultNamespace, events.OpCancelPrompt),
			&events.AcpCancelPromptRequest{SessionID: new("s1")}, nil)
		if err != nil || resp.Status != events.CancelNoActivePrompt {
			t.Errorf("cancel = %+v, %v; want %s", resp, err, events.CancelNoActivePrompt)
		}
	})

	t.Run("delete", func(t *testing.T) {
		c := newContract(t, start)
		c.open(t, "s1")
		c.await(t, "s1", c.prompt(t, "s1", nil, "hi"))
		for range 2 {
			if _, err := events.Call[events.AcpDeleteSessionResponse](t.Context(), c.nc, events.APISubject(events.DefaultNamespace, events.OpDeleteSession),
				&events.AcpDeleteSessionRequest{SessionID: new("s1")}, nil); err != nil {
				t.Fatalf("delete: %v", err)
			}
		}
		last, err := eventlog.Last(t.Context(), c.js, events.StreamLog, events.LogFilter(events.DefaultNamespace, "s1"))
		if err != nil || last == nil || last.Header.Get(events.HeaderRecord) != events.RecordSessionDeleted {
			t.Fatalf("the log ends with %v (%v), want the SessionDeleted tombstone", last, err)
		}
		_, err = c.call(t, &events.AcpPromptRequest{SessionID: new("s1"), Content: content("hi")})
		wantCode(t, "a prompt after the delete", err, events.CodeSessionNotFound)
		c.open(t, "s1")
		c.await(t, "s1", c.prompt(t, "s1", nil, "again"))
		eventlogtest.Audit(t, c.js, events.DefaultNamespace, "s1")
	})
}

// contract is one service under the contract.
type contract struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	agent string
}

func newContract(t *testing.T, start func(t *testing.T) SessionService) *contract {
	t.Helper()
	svc := start(t)
	js, err := jetstream.New(svc.NC)
	if err != nil {
		t.Fatal(err)
	}
	return &contract{nc: svc.NC, js: js, agent: svc.Agent}
}

func content(text string) events.JSON {
	return events.JSON(`[{"type":"text","text":"` + text + `"}]`)
}

func (c *contract) open(t *testing.T, sid string) {
	t.Helper()
	if _, err := events.Call[events.AcpOpenSessionResponse](t.Context(), c.nc, events.APISubject(events.DefaultNamespace, events.OpOpenSession),
		&events.AcpOpenSessionRequest{SessionID: &sid, Agent: c.agent}, nil); err != nil {
		t.Fatalf("open %s: %v", sid, err)
	}
}

func (c *contract) call(t *testing.T, req *events.AcpPromptRequest) (*events.PromptAccepted, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	return events.Call[events.PromptAccepted](ctx, c.nc, events.APISubject(events.DefaultNamespace, events.OpPrompt), req, nil)
}

func (c *contract) prompt(t *testing.T, sid string, key *string, text string) *events.PromptAccepted {
	t.Helper()
	acc, err := c.call(t, &events.AcpPromptRequest{SessionID: &sid, IdempotencyKey: key, Content: content(text)})
	if err != nil {
		t.Fatalf("prompt %s: %v", sid, err)
	}
	if acc.TurnID == "" || acc.Sequence == 0 || acc.SessionID != sid {
		t.Fatalf("prompt %s = %+v, want a turn, its sequence and the session", sid, acc)
	}
	return acc
}

func (c *contract) await(t *testing.T, sid string, acc *events.PromptAccepted) *events.TurnFinished {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	f, err := eventlog.AwaitTurn(ctx, c.js, events.DefaultNamespace, events.SessionID(sid), acc)
	if err != nil {
		t.Fatalf("await turn %s: %v", acc.TurnID, err)
	}
	if f.TurnID != acc.TurnID {
		t.Fatalf("await turn %s = the finish of %s", acc.TurnID, f.TurnID)
	}
	return f
}

func wantCode(t *testing.T, what string, err error, code events.Code) {
	t.Helper()
	if !errors.Is(err, &events.Error{Code: code}) {
		t.Errorf("%s: %v, want %s", what, err, code)
	}
}
