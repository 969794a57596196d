package session_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/services/session"
)

// The rules of requests waiting for a person under forced races, for both
// kinds: an answer against a cancel, and against another answer.

// waitingKind is one kind of request waiting for a person, as the race
// suites drive it.
type waitingKind struct {
	name   string
	sids   []string // the sessions a race is spread over
	open   events.AcpOpenSessionRequest
	script string // asks once, then says "after"
	// wait waits for the durable request stored after sequence after.
	wait func(ctx context.Context, h *rig, sid string, after uint64) (requestID string, err error)
	// answer sends one of the kind's two answers (first or second) and
	// returns how it went.
	answer func(ctx context.Context, h *rig, sid, requestID string, first bool) (status string, reason *string, err error)
	// ended returns the finish of the turn that asked requestID, the
	// agent's text in it, and the durable responses to the request.
	ended func(ctx context.Context, t *testing.T, h *rig, sid, requestID string) (*events.TurnFinished, string, []waitingResponse, error)
	// answered reports whether the durable response and the agent's text
	// are the first answer's (first) or the second's.
	answered func(resp waitingResponse, text string, first bool) bool
}

// waitingResponse is a durable response of either kind.
type waitingResponse struct {
	Status   string
	Reason   *string
	Response string
}

var waitingKinds = []waitingKind{
	{
		name:   "permission",
		sids:   []string{"p0", "p1", "p2", "p3"},
		open:   events.AcpOpenSessionRequest{PermissionPolicy: ptr(events.PolicyAsk)},
		script: permissionScript,
		wait: func(ctx context.Context, h *rig, sid string, after uint64) (string, error) {
			_, req, err := h.waitPermissionRequest(ctx, sid, after)
			if err != nil {
				return "", err
			}
			return req.RequestID, nil
		},
		answer: func(ctx context.Context, h *rig, sid, requestID string, first bool) (string, *string, error) {
			option := "no"
			if first {
				option = "yes"
			}
			res, err := h.respondPermission(ctx, sid, requestID, option)
			if err != nil {
				return "", nil, err
			}
			return res.Status, res.Reason, nil
		},
		ended: func(ctx context.Context, t *testing.T, h *rig, sid, requestID string) (*events.TurnFinished, string, []waitingResponse, error) {
			turn, resps, err := turnOfRequest(t, h, sid, requestID)
			if err != nil {
				return nil, "", nil, err
			}
			var out []waitingResponse
			for _, r := range resps {
				out = append(out, waitingResponse{r.resp.Status, r.resp.Reason, string(r.resp.Response)})
			}
			return turn.Finish, "", out, nil
		},
		answered: func(resp waitingResponse, _ string, first bool) bool {
			option := "no"
			if first {
				option = "yes"
			}
			return strings.Contains(resp.Response, `"`+option+`"`)
		},
	},
	{
		name:   "input",
		sids:   []string{"q0", "q1", "q2", "q3"},
		script: inputScript,
		wait: func(ctx context.Context, h *rig, sid string, after uint64) (string, error) {
			_, req, err := h.waitInputRequest(ctx, sid, after)
			if err != nil {
				return "", err
			}
			return req.RequestID, nil
		},
		answer: func(ctx context.Context, h *rig, sid, requestID string, first bool) (string, *string, error) {
			action, content := "decline", ""
			if first {
				action, content = "accept", `{"name":"n"}`
			}
			res, err := h.respondInput(ctx, sid, requestID, action, content)
			if err != nil {
				return "", nil, err
			}
			return res.Status, res.Reason, nil
		},
		ended: func(ctx context.Context, _ *testing.T, h *rig, sid, requestID string) (*events.TurnFinished, string, []waitingResponse, error) {
			finish, text, resps, err := turnOfInput(ctx, h, sid, requestID)
			if err != nil {
				return nil, "", nil, err
			}
			var out []waitingResponse
			for _, r := range resps {
				out = append(out, waitingResponse{r.Status, r.Reason, string(r.Response)})
			}
			return finish, text, out, nil
		},
		answered: func(resp waitingResponse, text string, first bool) bool {
			response, said := `{"action":"decline"}`, "input: decline"
			if first {
				response, said = `{"action":"accept","content":{"name":"n"}}`, `input: accept {"name":"n"}`
			}
			return resp.Response == response && text == said+"\nafter"
		},
	},
}

// race runs n iterations of a race over a request of the kind (requestRace).
func (k waitingKind) race(t *testing.T, h *rig, n int,
	contend func(sid string, i int, requestID string) (any, error),
	check func(sid string, i int, requestID string, got any, pr promptResult) error,
) {
	t.Helper()
	wait := func(ctx context.Context, sid string, after uint64) (*eventlog.Record, string, error) {
		id, err := k.wait(ctx, h, sid, after)
		return nil, id, err
	}
	requestRace(t, h, n, k.sids, k.open, k.script, wait, contend, check)
}

// An answer against cancelPrompt: one winner, recorded once; the loser's
// answer names it.
func TestAnswerRacesCancel(t *testing.T) {
	for _, k := range waitingKinds {
		t.Run(k.name, func(t *testing.T) {
			h := startRig(t, session.Config{})
			ctx := t.Context()
			type answers struct {
				status string
				reason *string
				cancel *events.AcpCancelPromptResponse
			}
			var answerWon, cancelWon atomic.Int64
			k.race(t, h, iterations(200),
				func(sid string, i int, requestID string) (any, error) {
					var a answers
					var rerr, cerr error
					race(i,
						func() { a.status, a.reason, rerr = k.answer(ctx, h, sid, requestID, true) },
						func() { a.cancel, cerr = h.cancelPrompt(ctx, sid) })
					return a, errors.Join(rerr, cerr)
				},
				func(sid string, i int, requestID string, got any, pr promptResult) error {
					a := got.(answers)
					finish, _, resps, err := k.ended(ctx, t, h, sid, requestID)
					if err != nil {
						return err
					}
					if len(resps) != 1 {
						return fmt.Errorf("%d %s responses for %s, want 1", len(resps), k.name, requestID)
					}
					resp := resps[0]
					switch a.status {
					case events.PermissionAccepted:
						answerWon.Add(1)
						if resp.Status != events.PermissionAccepted {
							return fmt.Errorf("the answer was accepted, the log says %+v", resp)
						}
						// The cancel came second: it cancelled the rest of the
						// turn, or found it over.
						switch {
						case a.cancel.Status == events.CancelCancelled && finish.Outcome == events.OutcomeCancelled:
						case (a.cancel.Status == events.OutcomeCompleted || a.cancel.Status == events.CancelNoActivePrompt) && finish.Outcome == events.OutcomeCompleted:
						default:
							return fmt.Errorf("cancel answered %s, the turn ended %s", a.cancel.Status, finish.Outcome)
						}
					case events.PermissionNotPending:
						cancelWon.Add(1)
						if a.reason == nil || *a.reason != events.ReasonPromptCancelled {
							return fmt.Errorf("the answer lost with reason %v, want %s", a.reason, events.ReasonPromptCancelled)
						}
						if resp.Status != events.PermissionTerminal || resp.Reason == nil || *resp.Reason != events.ReasonPromptCancelled {
							return fmt.Errorf("cancel won, the log's response is %+v", resp)
						}
						if a.cancel.Status != events.CancelCancelled || finish.Outcome != events.OutcomeCancelled {
							return fmt.Errorf("cancel won, it answered %s and the turn ended %s", a.cancel.Status, finish.Outcome)
						}
					default:
						return fmt.Errorf("the answer got %s %v", a.status, a.reason)
					}
					if pr.err != nil || pr.res.StopReason != finish.StopReason {
						return fmt.Errorf("prompt = %+v, %v; the turn ended %s/%s", pr.res, pr.err, finish.Outcome, finish.StopReason)
					}
					return nil
				})
			t.Logf("answer won %d, cancel won %d", answerWon.Load(), cancelWon.Load())
			if k.name != "permission" {
				return
			}
			// Each permission's wait is timed once, by how it ended, before
			// the winner answers.
			for end, want := range map[string]int64{"answered": answerWon.Load(), "terminal": cancelWon.Load()} {
				if n := testutil.Metric(t, h.reg, "acp_session_permission_wait_seconds", "end", end); n != float64(want) {
					t.Errorf("permission waits ended %s: %v observed, want %d", end, n, want)
				}
			}
		})
	}
}

// An answer against another answer: one accepted, the other
// not_pending/already_resolved, and the agent acts on the winner's.
func TestAnswerRacesAnswer(t *testing.T) {
	for _, k := range waitingKinds {
		t.Run(k.name, func(t *testing.T) {
			h := startRig(t, session.Config{})
			ctx := t.Context()
			type answer struct {
				status string
				reason *string
			}
			type answers struct{ first, second answer }
			k.race(t, h, iterations(200),
				func(sid string, i int, requestID string) (any, error) {
					var a answers
					var ferr, serr error
					var wg sync.WaitGroup
					wg.Go(func() { a.first.status, a.first.reason, ferr = k.answer(ctx, h, sid, requestID, true) })
					wg.Go(func() { a.second.status, a.second.reason, serr = k.answer(ctx, h, sid, requestID, false) })
					wg.Wait()
					return a, errors.Join(ferr, serr)
				},
				func(sid string, i int, requestID string, got any, pr promptResult) error {
					a := got.(answers)
					winner, loser, first := a.first, a.second, true
					if a.second.status == events.PermissionAccepted {
						winner, loser, first = a.second, a.first, false
					}
					if winner.status != events.PermissionAccepted || loser.status != events.PermissionNotPending ||
						loser.reason == nil || *loser.reason != events.ReasonAlreadyResolved {
						return fmt.Errorf("answers %+v and %+v, want one accepted and one not_pending/already_resolved", a.first, a.second)
					}
					_, text, resps, err := k.ended(ctx, t, h, sid, requestID)
					if err != nil {
						return err
					}
					if len(resps) != 1 || resps[0].Status != events.PermissionAccepted || !k.answered(resps[0], text, first) {
						return fmt.Errorf("%s responses %+v (agent text %q), want one accepted, the winner's", k.name, resps, text)
					}
					if pr.err != nil || !strings.Contains(string(pr.res.Message), "after") {
						return fmt.Errorf("prompt = %+v, %v", pr.res, pr.err)
					}
					return nil
				})
		})
	}
}
