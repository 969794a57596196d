package test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"skein.dev/pkg/events"
)

// Checked histories (issue 31 §6). The fault tests record every client
// operation on a session, with the times it was called and answered, and
// check the history of each session with porcupine against a sequential
// model of a session: one turn at a time; a cancel and a turn's completion
// race, and whichever the log records first wins; a permission request
// takes one answer; a deleted session stays deleted until it is opened
// again. A history no order of the operations within their times explains
// fails the test, with porcupine's visualization.
//
// A blocking HTTP prompt is two operations over the same interval: its
// acceptance (a turn starts, or joins the turn of its idempotency key, or
// is refused), and its turn's end with its outcome. Both happened while
// the request was open, acceptance first.

// sessionOp is an operation's input.
type sessionOp struct {
	Session string
	Kind    string // open, prompt, await, cancel, respond, delete, get
	Key     string // prompt: the idempotency key
	Turn    string // await: the turn
	Request string // respond: the permission request
}

// sessionResult is an operation's output.
//
//	open     ok, refused (nothing done: the store is full)
//	prompt   accepted (Turn), busy, not_found, refused
//	await    Outcome: completed, cancelled, failed, or stop:<reason>
//	cancel   cancelled, no_active_prompt, not_found, or ended (Outcome: the
//	         turn ended on its own while the cancel waited)
//	respond  accepted, not_pending, not_found, refused
//	delete   ok
//	get      idle, busy (Turn: the running turn, when the answer names it),
//	         not_found
type sessionResult struct {
	Status  string
	Turn    string
	Outcome string
}

// modelState is the model's state of one session. Steps return a new
// one; the maps are never changed in place.
type modelState struct {
	exists   bool
	running  string            // the running turn, or ""
	key      string            // its idempotency key
	outcomes map[string]string // turn → outcome, once ended
	keys     map[string]string // idempotency key → turn
	answered map[string]bool   // permission requests answered
	deleted  map[string]bool   // turns ended by the session's deletion
}

func (s modelState) clone() modelState {
	s.outcomes = maps.Clone(s.outcomes)
	s.keys = maps.Clone(s.keys)
	s.answered = maps.Clone(s.answered)
	s.deleted = maps.Clone(s.deleted)
	return s
}

func (s modelState) String() string {
	return fmt.Sprintf("exists=%v running=%q key=%q outcomes=%v answered=%v", s.exists, s.running, s.key, s.outcomes, slices.Sorted(maps.Keys(s.answered)))
}

// end ends the running turn with outcome.
func (s modelState) end(outcome string) modelState {
	s = s.clone()
	if s.outcomes == nil {
		s.outcomes = map[string]string{}
	}
	s.outcomes[s.running] = outcome
	s.running, s.key = "", ""
	return s
}

// deletedOutcome: a turn the session's deletion cancelled answers as a
// cancel's would, or with the deletion's error.
func deletedOutcome(outcome string) bool {
	return outcome == "cancelled" || outcome == "failed"
}

// stepSession is the model: whether a session in state s can do op with
// result res, and the state after.
func stepSession(s modelState, op sessionOp, res sessionResult) (bool, modelState) {
	switch op.Kind {
	case "open":
		if res.Status == "refused" {
			return true, s
		}
		if s.exists {
			return true, s // reopening is a no-op
		}
		return true, modelState{exists: true}
	case "prompt":
		switch res.Status {
		case "not_found":
			return !s.exists, s
		case "busy":
			return s.exists && s.running != "" && (op.Key == "" || s.key != op.Key), s
		case "refused":
			return true, s
		case "accepted":
			if !s.exists {
				return false, s
			}
			if op.Key != "" && s.keys[op.Key] != "" {
				return s.keys[op.Key] == res.Turn, s // joins its key's turn
			}
			if s.running != "" {
				return false, s // two turns at once
			}
			if _, ended := s.outcomes[res.Turn]; ended {
				return false, s // a turn that ended, begun again
			}
			s = s.clone()
			s.running, s.key = res.Turn, op.Key
			if op.Key != "" {
				if s.keys == nil {
					s.keys = map[string]string{}
				}
				s.keys[op.Key] = res.Turn
			}
			return true, s
		}
	case "await":
		if s.running == op.Turn {
			return true, s.end(res.Outcome)
		}
		if got, ended := s.outcomes[op.Turn]; ended {
			return got == res.Outcome || (s.deleted[op.Turn] && deletedOutcome(res.Outcome)), s
		}
		return false, s
	case "cancel":
		switch res.Status {
		case "not_found":
			return !s.exists, s
		case "no_active_prompt":
			return s.exists && s.running == "", s
		case "cancelled":
			return s.running != "", s.end("cancelled")
		case "ended":
			return s.running != "", s.end(res.Outcome)
		}
	case "respond":
		switch res.Status {
		case "not_found":
			return !s.exists, s
		case "not_pending", "refused":
			return true, s
		case "accepted":
			if !s.exists || s.answered[op.Request] {
				return false, s // a second answer
			}
			s = s.clone()
			if s.answered == nil {
				s.answered = map[string]bool{}
			}
			s.answered[op.Request] = true
			return true, s
		}
	case "delete":
		if s.running != "" {
			turn := s.running
			s = s.end("cancelled")
			if s.deleted == nil {
				s.deleted = map[string]bool{}
			}
			s.deleted[turn] = true
		}
		s = s.clone()
		s.exists, s.keys, s.answered = false, nil, nil
		return true, s
	case "get":
		switch res.Status {
		case "not_found":
			return !s.exists, s
		case "idle":
			return s.exists && s.running == "", s
		case "busy":
			return s.exists && s.running != "" && (res.Turn == "" || res.Turn == s.running), s
		}
	}
	return false, s
}

// sessionModel is the porcupine model: histories partitioned by session.
var sessionModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range history {
			sid := op.Input.(sessionOp).Session
			by[sid] = append(by[sid], op)
		}
		var out [][]porcupine.Operation
		for _, sid := range slices.Sorted(maps.Keys(by)) {
			out = append(out, by[sid])
		}
		return out
	},
	Init: func() any { return modelState{} },
	Step: func(state, input, output any) (bool, any) {
		return stepSession(state.(modelState), input.(sessionOp), output.(sessionResult))
	},
	Equal: func(a, b any) bool { return a.(modelState).String() == b.(modelState).String() },
	DescribeOperation: func(input, output any) string {
		op, res := input.(sessionOp), output.(sessionResult)
		arg := strings.TrimSpace(op.Key + " " + op.Turn + " " + op.Request)
		out := strings.TrimSpace(res.Status + " " + res.Turn + " " + res.Outcome)
		return fmt.Sprintf("%s(%s) → %s", op.Kind, arg, out)
	},
	DescribeState: func(state any) string { return state.(modelState).String() },
}

// opHistory records the operations of a test's clients.
type opHistory struct {
	start time.Time

	mu  sync.Mutex
	ops []porcupine.Operation
	// unknown are sessions with an operation whose effect is unknown (no
	// answer, nothing retried it to one): their histories are not
	// checked, and the test says so.
	unknown map[string]string
	// failed: a check failed; later ones, of the same history, would
	// only repeat it.
	failed bool
}

func newOpHistory() *opHistory {
	return &opHistory{start: time.Now(), unknown: map[string]string{}}
}

// now is a time of the history: nanoseconds since it began, monotonic.
func (h *opHistory) now() int64 { return int64(time.Since(h.start)) }

// add records an operation called at call and answered now, by client.
func (h *opHistory) add(client int, call int64, op sessionOp, res sessionResult) {
	ret := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: op, Call: call, Output: res, Return: ret})
}

// lost notes that an operation on sid had an unknown effect.
func (h *opHistory) lost(sid, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unknown[sid] = why
}

// check checks every session's history that is whole; one that does not
// linearize fails t, and porcupine's visualization is written to a file
// that outlives the test, whose path the failure names.
func (h *opHistory) check(t *testing.T, name string) {
	t.Helper()
	h.mu.Lock()
	if h.failed {
		h.mu.Unlock()
		return
	}
	var ops []porcupine.Operation
	for _, op := range h.ops {
		if _, skip := h.unknown[op.Input.(sessionOp).Session]; !skip {
			ops = append(ops, op)
		}
	}
	unknown := maps.Clone(h.unknown)
	h.mu.Unlock()
	for sid, why := range unknown {
		t.Logf("%s: session %s's history is not checked: %s", name, sid, why)
	}
	res, info := porcupine.CheckOperationsVerbose(sessionModel, ops, time.Minute)
	kinds := map[string]int{}
	for _, op := range ops {
		in, out := op.Input.(sessionOp), op.Output.(sessionResult)
		kinds[in.Kind+":"+out.Status+out.Outcome]++
	}
	t.Logf("%s: %d operations checked for linearizability: %s %v", name, len(ops), res, kinds)
	if res == porcupine.Ok {
		return
	}
	h.mu.Lock()
	h.failed = true
	h.mu.Unlock()
	dir, err := os.MkdirTemp("", "skein-porcupine-")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".html")
	if err := porcupine.VisualizePath(sessionModel, info, path); err != nil {
		t.Errorf("%s: write the visualization: %v", name, err)
	}
	t.Errorf("%s: the clients' history of the sessions is not linearizable (%s): see %s", name, res, path)
	// The sessions at fault, their operations in the order called.
	for _, part := range sessionModel.Partition(ops) {
		if porcupine.CheckOperations(sessionModel, part) {
			continue
		}
		slices.SortFunc(part, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
		var b strings.Builder
		for _, op := range part {
			fmt.Fprintf(&b, "\n  [%.3f, %.3f] client %d: %s", float64(op.Call)/1e9, float64(op.Return)/1e9, op.ClientId, sessionModel.DescribeOperation(op.Input, op.Output))
		}
		t.Logf("%s: session %s, not linearizable:%s", name, part[0].Input.(sessionOp).Session, b.String())
	}
}

// recordPrompt records a prompt of sid with key, called at call, that
// answered a (after any keyed retries: one operation), by client.
func (r *faultRig) recordPrompt(client int, call int64, sid, key string, a answer) {
	r.hist.prompt(client, call, sid, key, a)
}

// prompt records a prompt of sid with key ("" for none), called at call,
// that answered a, by client.
func (h *opHistory) prompt(client int, call int64, sid, key string, a answer) {
	op := sessionOp{Session: sid, Kind: "prompt", Key: key}
	switch {
	case a.turn != "":
		h.add(client, call, op, sessionResult{Status: "accepted", Turn: a.turn})
		h.add(client, call, sessionOp{Session: sid, Kind: "await", Turn: a.turn}, sessionResult{Outcome: a.outcome()})
	case a.errorCode() == string(events.CodeSessionBusy):
		h.add(client, call, op, sessionResult{Status: "busy"})
	case a.errorCode() == string(events.CodeSessionNotFound):
		h.add(client, call, op, sessionResult{Status: "not_found"})
	case a.errorCode() == string(events.CodeStorageFull):
		h.add(client, call, op, sessionResult{Status: "refused"})
	default:
		h.lost(sid, fmt.Sprintf("prompt %s answered %v", key, a))
	}
}

// outcome is the outcome of an accepted prompt's turn, as the model
// names it.
func (a answer) outcome() string {
	if a.code != http.StatusOK {
		return "failed"
	}
	var res struct {
		StopReason string `json:"stopReason"`
	}
	_ = json.Unmarshal(a.body, &res)
	switch res.StopReason {
	case "end_turn":
		return "completed"
	case "cancelled":
		return "cancelled"
	}
	return "stop:" + res.StopReason
}

// readStates reads every fault session's state, in turn, through each
// gateway, until ctx ends.
func (r *faultRig) readStates(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		r.readState(ctx, r.sessions+n%2, r.sessions+n%2, fmt.Sprint("f", n%r.sessions))
		if !wait(ctx, 20*time.Millisecond) {
			return
		}
	}
}

// readState reads sid's state through gateway gw, as client, records the
// answer, and returns the first pending permission request it names. A
// read that fails has no effect and is not recorded.
func (r *faultRig) readState(ctx context.Context, client, gw int, sid string) string {
	call := r.hist.now()
	code, body := r.do(ctx, gw, http.MethodGet, "/v1/sessions/"+sid, nil)
	var info struct {
		State events.SessionState `json:"state"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &info)
	op := sessionOp{Session: sid, Kind: "get"}
	switch {
	case code == http.StatusOK && info.State.TurnID != "":
		r.hist.add(client, call, op, sessionResult{Status: "busy", Turn: info.State.TurnID})
	case code == http.StatusOK && info.State.Status == events.StatusRunning:
		r.hist.add(client, call, op, sessionResult{Status: "busy"})
	case code == http.StatusOK:
		r.hist.add(client, call, op, sessionResult{Status: "idle"})
	case code == http.StatusNotFound && info.Error.Code == string(events.CodeSessionNotFound):
		r.hist.add(client, call, op, sessionResult{Status: "not_found"})
	}
	if len(info.State.Requests) > 0 {
		return info.State.Requests[0].RequestID
	}
	return ""
}

// mixedSessions is how many sessions, besides the fault's own, take every
// kind of operation during each fault.
const mixedSessions = 2

// mixedOps opens sid, then, until ctx ends, runs rounds of operations on
// it from three clients (client, client+1, client+2), and deletes it. A
// round is a keyed prompt whose turn asks a permission and then streams
// for a moment; two clients answer the request at once (one answer is
// accepted, the other is not pending), and one of them then cancels the
// turn, racing its completion. After the deletion a get and a prompt must
// find no session. Every operation is recorded; one whose answer never
// came (retried while the answer was an error that says retry, until ctx
// ends) leaves the session's history unchecked.
func (r *faultRig) mixedOps(ctx context.Context, client int, sid string) {
	r.openWith(sid, map[string]string{"agent": "test", "permissionPolicy": "ask"})
	// A round begun is finished: its operations outlive ctx, each bounded.
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	// stage says where the round is, for a round that never ends.
	var stage atomic.Value
	at := func(what string) { stage.Store(fmt.Sprintf("%s (since %s)", what, time.Now().Format("15:04:05.000"))) }
	for round := 0; ctx.Err() == nil; round++ {
		key := fmt.Sprintf("%s-r%d", sid, round)
		ended := make(chan struct{})
		at(fmt.Sprintf("round %d: prompt sent, its request not yet seen", round))
		go func() {
			defer close(ended)
			call := r.hist.now()
			a := r.retryPrompt(octx, client, sid, key, "permission c1\nstamp 5 update 40ms")
			r.recordPrompt(client, call, sid, key, a)
		}()
		req := r.awaitRequest(octx, client+1, sid, ended)
		if req != "" {
			at(fmt.Sprintf("round %d: answering request %s", round, req))
			var answers sync.WaitGroup
			for c := range 2 {
				answers.Go(func() { r.respond(octx, client+1+c, sid, req) })
			}
			answers.Wait()
			at(fmt.Sprintf("round %d: cancelling", round))
			r.cancel(octx, client+2, sid)
		} else {
			// No state could be read (the history service is down for
			// the fault): the turn waits on a request nobody saw, and is
			// cancelled, unless it ended.
			select {
			case <-ended:
			default:
				at(fmt.Sprintf("round %d: cancelling a turn whose request was never seen", round))
				r.cancel(octx, client+2, sid)
			}
		}
		at(fmt.Sprintf("round %d: waiting for the prompt to return (request %q)", round, req))
		<-ended
	}
	// Deleted: stays deleted.
	call := r.hist.now()
	if code, body := r.retryDo(octx, client, http.MethodDelete, "/v1/sessions/"+sid, nil); code != http.StatusOK {
		r.hist.lost(sid, fmt.Sprintf("delete answered %d %s; the last round was at: %v", code, body, stage.Load()))
		return
	}
	r.hist.add(client, call, sessionOp{Session: sid, Kind: "delete"}, sessionResult{Status: "ok"})
	call = r.hist.now()
	a := r.retryPrompt(octx, client, sid, sid+"-after", "say resurrected")
	r.recordPrompt(client, call, sid, sid+"-after", a)
}

// retryPrompt is prompt, sent again with its key while the answer says to
// retry and ctx lasts: one operation.
func (r *faultRig) retryPrompt(ctx context.Context, gw int, sid, key, text string) answer {
	for {
		a := r.prompt(ctx, gw, sid, key, text)
		if !a.retryable() || !wait(ctx, 100*time.Millisecond) {
			return a
		}
		gw++
	}
}

// retryDo is do, sent again while there is no answer or the answer says
// to retry, and ctx lasts.
func (r *faultRig) retryDo(ctx context.Context, gw int, method, path string, body any) (int, []byte) {
	for {
		code, b := r.do(ctx, gw, method, path, body)
		if !(answer{code: code, body: b}).retryable() || !wait(ctx, 100*time.Millisecond) {
			return code, b
		}
		gw++
	}
}

// awaitRequest reads sid's state, each read recorded, until it names a
// pending permission request, and returns its ID: "" when the prompt's
// turn ended first (ended is closed) or ctx did.
func (r *faultRig) awaitRequest(ctx context.Context, client int, sid string, ended <-chan struct{}) string {
	// Through each gateway in turn: one may be down for the fault, and
	// the request is answered only once it is read. A minute without it
	// gives up: nothing may be able to read it (the history service
	// down).
	deadline := time.Now().Add(time.Minute)
	for gw := client; time.Now().Before(deadline); gw++ {
		if req := r.readState(ctx, client, gw, sid); req != "" {
			return req
		}
		select {
		case <-ended:
			return ""
		case <-ctx.Done():
			return ""
		case <-time.After(20 * time.Millisecond):
		}
	}
	return ""
}

// respond answers sid's permission request req, as one operation.
func (r *faultRig) respond(ctx context.Context, client int, sid, req string) {
	call := r.hist.now()
	code, body := r.retryDo(ctx, client, http.MethodPost, "/v1/sessions/"+sid+"/permissions/"+req, map[string]string{"optionId": "allow"})
	var res struct {
		Status string `json:"status"`
	}
	op := sessionOp{Session: sid, Kind: "respond", Request: req}
	switch a := (answer{code: code, body: body}); {
	case code == http.StatusOK && json.Unmarshal(body, &res) == nil && (res.Status == "accepted" || res.Status == "not_pending"):
		r.hist.add(client, call, op, sessionResult{Status: res.Status})
	case a.errorCode() == string(events.CodeSessionNotFound):
		r.hist.add(client, call, op, sessionResult{Status: "not_found"})
	default:
		r.hist.lost(sid, fmt.Sprintf("answer to %s: %d %s", req, code, body))
	}
}

// cancel cancels sid's turn, as one operation.
func (r *faultRig) cancel(ctx context.Context, client int, sid string) {
	call := r.hist.now()
	code, body := r.retryDo(ctx, client, http.MethodPost, "/v1/sessions/"+sid+"/cancel", nil)
	var res struct {
		Status string `json:"status"`
	}
	op := sessionOp{Session: sid, Kind: "cancel"}
	switch a := (answer{code: code, body: body}); {
	case code == http.StatusOK && json.Unmarshal(body, &res) == nil && (res.Status == "cancelled" || res.Status == "no_active_prompt"):
		r.hist.add(client, call, op, sessionResult{Status: res.Status})
	case code == http.StatusOK && res.Status != "":
		r.hist.add(client, call, op, sessionResult{Status: "ended", Outcome: res.Status})
	case a.errorCode() == string(events.CodeSessionNotFound):
		r.hist.add(client, call, op, sessionResult{Status: "not_found"})
	default:
		r.hist.lost(sid, fmt.Sprintf("cancel: %d %s", code, body))
	}
}
