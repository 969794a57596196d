package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

// turn is one `skein prompt` or `skein attach`.
type turn struct {
	app     *app
	cl      *client
	session string
	agent   string
	policy  *string // of a session the turn opens
	cwd     *string // of a session the turn opens; nil: the shell's, if allowed
	key     *string
	queue   bool // sent with queue: it waits behind a running turn
	// flags names the flags given that apply only to a new session, for
	// the error when the session exists.
	flags []string
	// attach names the uploads the prompt references (files.go).
	attach []string
	// input, when set, is where the user types answers to permission
	// requests. It is read from the first request on by a goroutine that
	// returns at the end of input or when it has a line no one wants
	// anymore: a read that blocks (a terminal) outlives the command.
	input io.Reader
}

// ending is how a watched turn ended, as far as the viewer knows.
type ending struct {
	stopReason string
	err        error      // the turn's failure, or a failure to learn its end
	queued     *queuedRef // the prompt was queued: no turn of its own yet
}

// run opens the session if needed, subscribes to its events after its
// latest sequence, sends the prompt, and prints the events of the turn as
// they stream. When the prompt returns, it catches up on any durable event
// the stream had not delivered yet, from history, so the printed reply is
// complete however the stream fared.
func (t *turn) run(ctx context.Context, text string) error {
	// Ctrl-C is the turn's from the start: one pressed while the agent
	// starts cancels the turn once it is accepted.
	interrupts, release := take(ctx)
	defer release()
	phase := phaseRestore
	info, err := t.cl.session(ctx, t.session)
	if isCode(err, string(events.CodeSessionNotFound)) {
		req := openRequest{Agent: t.agent, PermissionPolicy: t.policy, Cwd: t.cwd}
		if req.Cwd == nil {
			req.Cwd = t.app.shellCwd(ctx, t.cl)
		}
		if err := t.cl.open(ctx, t.session, req); err != nil {
			return fmt.Errorf("open %s: %w", t.session, err)
		}
		phase = phaseStarting
		info, err = t.cl.session(ctx, t.session)
	} else if err == nil && len(t.flags) > 0 {
		verb := "apply"
		if len(t.flags) == 1 {
			verb = "applies"
		}
		return usagef("session %s exists (agent %s): %s %s only to a new session; drop it, or use another --session",
			t.session, info.Agent, strings.Join(t.flags, ", "), verb)
	}
	if err != nil {
		return fmt.Errorf("session %s: %w", t.session, err)
	}

	content, err := json.Marshal(promptContent(text, t.attach))
	if err != nil {
		return fmt.Errorf("encode prompt: %w", err)
	}
	v := t.newView(info.LatestSequence)
	defer v.close()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	f, err := t.cl.openFeed(sctx, t.session, info.LatestSequence, nil)
	if err != nil {
		return fmt.Errorf("events of %s: %w", t.session, err)
	}
	defer func() {
		stop()
		for range f.events { // the feed ends with sctx
		}
	}()

	// The prompt request runs beside the loop, which prints the turn's
	// events meanwhile. run owns it: whichever way run returns, the
	// request is cancelled (the turn goes on in the session service; only
	// the wait for it ends) and run waits for the goroutine to end.
	end := make(chan ending, 1)
	pctx, cancelPrompt := context.WithCancel(ctx)
	promptDone := make(chan struct{})
	go func() {
		defer close(promptDone)
		resp, err := t.cl.prompt(pctx, t.session, promptRequest{IdempotencyKey: t.key, Content: content, Queue: t.queue})
		if err != nil {
			end <- ending{err: err}
			return
		}
		end <- ending{stopReason: resp.StopReason, queued: resp.Queued}
	}()
	defer func() {
		cancelPrompt()
		<-promptDone
	}()
	v.p.setPhase(phase)
	return v.watch(ctx, f, end, "", interrupts)
}

// view is a turn watched live: its printer, its questions, and the last
// durable sequence it showed.
type view struct {
	t     *turn
	p     *printer
	asker *asker
	last  uint64
	done  chan struct{} // closed by close: the asker's reader stops
	// cancel is the state of a Ctrl-C's cancel: "" (none), "sent", or
	// "early" when it came before the turn was accepted and is sent
	// again once it is.
	cancel    string
	cancelled chan cancelResult
	// notes carries the feed's notes (a reconnect) from its goroutine to
	// watch, which alone draws on the printer. Nil when the feed has none.
	notes chan string
}

// cancelResult is the answer to a Ctrl-C's cancel. A view sends at most
// two cancels (one early, one again once the turn is accepted); their
// channel holds both answers, so that no sender waits on a view that
// returned.
type cancelResult struct {
	status string
	err    error
}

func (t *turn) newView(last uint64) *view {
	p := t.app.newPrinter()
	p.session = t.session
	v := &view{t: t, p: p, last: last, done: make(chan struct{}), cancelled: make(chan cancelResult, 2)}
	v.asker = &asker{t: t, p: p, input: t.input, done: v.done}
	return v
}

// close ends what the view started.
func (v *view) close() { close(v.done) }

// sendCancel asks the gateway to cancel the turn, answering on
// v.cancelled.
func (v *view) sendCancel(ctx context.Context) {
	v.cancel = "sent"
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		resp, err := v.t.cl.cancel(cctx, v.t.session)
		if err != nil {
			v.cancelled <- cancelResult{err: err}
			return
		}
		v.cancelled <- cancelResult{status: resp.Status}
	}()
}

// newPrinter returns a printer for the command's standard output: one
// with a live region on a terminal, a plain one on a pipe or a file.
func (a *app) newPrinter() *printer {
	if !a.fancy() {
		return newPrinter(a.stdout)
	}
	return newTermPrinter(a.stdout, termWidth(a.stdout, a.getenv))
}

// fancy reports whether standard output is a terminal that takes escape
// sequences.
func (a *app) fancy() bool {
	return isTerminal(a.stdout) && a.getenv("TERM") != "dumb"
}

// watch prints the turn's events from f until the turn ends: when end
// delivers (the prompt's answer), or, for a turn being attached to
// (turnID set), at its turn_finished state change. The first Ctrl-C
// (interrupts, taken by the caller) cancels the turn, and the view waits
// for it to end; a second stops the command. It returns a *TurnError for a turn that was cancelled or failed.
func (v *view) watch(ctx context.Context, f *feed, end chan ending, turnID string, interrupts <-chan struct{}) error {
	p := v.p
	var ticks <-chan time.Time
	if p.tty {
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		ticks = ticker.C
	}
	incoming := f.events
	var res ending
	for waiting := true; waiting; {
		select {
		case ev, ok := <-incoming:
			if !ok {
				incoming = nil // the feed stopped; history fills in below
				if f.Err() != nil && turnID != "" {
					return fmt.Errorf("events of %s: %w", v.t.session, f.Err())
				}
				continue
			}
			sc, err := v.show(ctx, ev)
			if err != nil {
				return err
			}
			if sc != nil && sc.Change == changeTurnFinished && turnID != "" && (sc.TurnID == turnID || sc.TurnID == "") {
				res = ending{stopReason: sc.StopReason}
				if sc.Error != nil {
					res.err = &APIError{Code: sc.Error.Code, Message: sc.Error.Message}
				}
				waiting = false
			}
		case line, ok := <-v.asker.next():
			if err := v.asker.answer(ctx, line, ok); err != nil {
				return err
			}
		case s := <-v.notes:
			v.note(s + "\n")
		case <-ticks:
			p.tick()
		case <-interrupts:
			interrupts = nil
			v.asker.interrupted()
			p.setPhase(phaseCancel)
			v.note("cancelling the turn (Ctrl-C again to stop waiting)\n")
			v.sendCancel(ctx)
		case r := <-v.cancelled:
			switch {
			case r.err != nil && ctx.Err() == nil:
				v.note(fmt.Sprintf("cancel %s: %v\n", v.t.session, r.err))
			case r.status == "no_active_prompt" && turnID == "":
				// The prompt is not accepted yet (its agent is
				// starting): cancel it once it is.
				v.cancel = "early"
			}
		case res = <-end:
			waiting = false
		case <-ctx.Done():
			return v.stopped()
		}
	}
	if ctx.Err() != nil {
		return v.stopped()
	}
	if res.queued != nil {
		if err := p.finish(); err != nil {
			return err
		}
		return v.t.reportQueued(res.queued)
	}
	if res.err != nil && !turnFailure(res.err) {
		if err := p.finish(); err != nil {
			return err
		}
		return fmt.Errorf("prompt %s: %w", v.t.session, res.err)
	}
	// What the stream still holds, history has.
	if err := v.catchUp(ctx); err != nil {
		return err
	}
	if err := p.finish(); err != nil {
		return err
	}
	return v.report(ctx, res)
}

// stopped ends the view of a command stopped before the turn's end was
// known: a second Ctrl-C, or SIGTERM.
func (v *view) stopped() error {
	_ = v.p.finish() // the command stops either way
	v.note("stopped waiting; the turn may still be running: skein attach" + sessionFlag(v.t.session) + " follows it\n")
	return errInterrupted
}

// sessionFlag returns " -s ID" for a session other than the default.
func sessionFlag(sid string) string {
	if sid == defaultSession {
		return ""
	}
	return " -s " + sid
}

// turnFailure reports whether a prompt's error is the turn's failure
// rather than a refusal of the request.
func turnFailure(err error) bool {
	e, ok := errors.AsType[*APIError](err)
	return ok && turnFailureCodes[e.Code]
}

// show prints one event of the feed. It returns the state change it was.
func (v *view) show(ctx context.Context, ev sseEvent) (*stateChange, error) {
	switch ev.Name {
	case sseState:
		var sc stateChange
		if err := decodeVisible(ev.Data, &sc); err != nil {
			return nil, fmt.Errorf("decode state event: %w", err)
		}
		switch sc.Change {
		case changeTurnAccepted:
			v.accepted(ctx)
		case changeWaiting:
			v.p.setPhase(phaseWaiting)
		case changeTurnFinished:
			if sc.DiscardDeltas {
				v.p.discard()
			}
		}
		return &sc, nil
	case eventjson.DurabilityDurable, eventjson.DurabilityEphemeral:
	default:
		return nil, nil
	}
	var e event
	if err := decodeVisible(ev.Data, &e); err != nil {
		return nil, fmt.Errorf("decode %s event: %w", ev.Name, err)
	}
	if ev.Name == eventjson.DurabilityDurable {
		seq, err := strconv.ParseUint(ev.ID, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("durable event with id %q: %w", ev.ID, err)
		}
		if seq <= v.last {
			return nil, nil
		}
		v.last = seq
	}
	v.showEvent(&e)
	if e.Type == acp.UpdateUserMessageChunk {
		v.accepted(ctx)
	}
	return nil, nil
}

// accepted follows the turn's acceptance: the spinner says the agent
// thinks, and a Ctrl-C that came before is sent again.
func (v *view) accepted(ctx context.Context) {
	if v.p.phase == phaseStarting || v.p.phase == phaseRestore {
		v.p.setPhase(phaseThinking)
	}
	if v.cancel == "early" {
		v.sendCancel(ctx)
	}
}

// showEvent prints an event and follows the requests and the phase it
// tells of.
func (v *view) showEvent(e *event) {
	switch e.Type {
	case eventjson.TypePermissionRequest, eventjson.TypeInputRequest:
		v.p.setPhase(phaseWaiting)
	case eventjson.TypePermissionResponse, eventjson.TypeInputResponse:
		if v.p.phase == phaseWaiting {
			v.p.setPhase(phaseThinking)
		}
	}
	v.p.render(e)
	v.asker.observe(e)
}

// catchUp prints the durable events after v.last from history.
func (v *view) catchUp(ctx context.Context) error {
	for {
		after := v.last
		page, err := v.t.cl.history(ctx, v.t.session, historyQuery{After: &after})
		if err != nil {
			return fmt.Errorf("history of %s: %w", v.t.session, err)
		}
		for _, raw := range page.Events {
			var e event
			if err := decodeVisible(raw, &e); err != nil {
				return fmt.Errorf("decode history event: %w", err)
			}
			if e.Sequence <= v.last {
				continue
			}
			v.last = e.Sequence
			v.showEvent(&e)
		}
		if !page.HasMoreAfter {
			return nil
		}
		if v.last == after {
			return errors.New("history has more events but returned none")
		}
	}
}

// report prints how the turn ended on standard error and returns the
// *TurnError of a turn that did not end well. On a terminal it adds the
// turn's timing and the session's usage; on a pipe it says only what is
// not a normal end.
func (v *view) report(ctx context.Context, res ending) error {
	var outcome string
	var err error
	switch {
	case res.err != nil:
		outcome = "turn failed: " + res.err.Error()
		err = &TurnError{Err: res.err}
	case res.stopReason == acp.StopReasonCancelled:
		outcome = "stop reason: cancelled"
		err = &TurnError{Cancelled: true}
	case res.stopReason == turnEnded:
		outcome = describeEnd(res.stopReason)
	case res.stopReason != acp.StopReasonEndTurn:
		outcome = "stop reason: " + res.stopReason
	}
	if !isTerminal(v.t.app.stderr) {
		if outcome != "" {
			v.note(outcome + "\n")
		}
		return err
	}
	if outcome == "" {
		outcome = res.stopReason
	}
	parts := []string{outcome}
	if info, ierr := v.t.cl.session(ctx, v.t.session); ierr == nil {
		if tm := info.LastTurnTiming; tm != nil && tm.FinishedMs != nil {
			s := duration(time.Duration(*tm.FinishedMs) * time.Millisecond)
			if tm.FirstReplyMs != nil {
				s += " (first reply " + duration(time.Duration(*tm.FirstReplyMs)*time.Millisecond) + ")"
			}
			parts = append(parts, s)
		}
		if info.Usage != nil {
			parts = append(parts, usageField(info.Usage)+" tokens")
		}
	}
	v.note(v.p.style(sgrDim, strings.Join(parts, " · ")) + "\n")
	return err
}

// note writes a diagnostic to standard error, under the region.
func (v *view) note(s string) {
	v.p.clearRegion()
	_, _ = io.WriteString(v.t.app.stderr, s) // a failed note is not worth failing the turn for
	v.p.drawRegion()
}

// shellCwd returns the shell's working directory when the gateway's
// workspace holds it (a new session then works there), and nil when it
// does not, or when that cannot be told: the server's default applies.
func (a *app) shellCwd(ctx context.Context, cl *client) *string {
	wd, err := os.Getwd()
	if err != nil {
		return nil
	}
	if ok, err := cl.inWorkspace(ctx, wd); err != nil || !ok {
		return nil
	}
	return &wd
}

// reportQueued says where a queued prompt waits, and how to withdraw it.
func (t *turn) reportQueued(q *queuedRef) error {
	if _, err := fmt.Fprintf(t.app.stdout, "queued as %s, position %d: it runs as its own turn when the turns before it end\n", q.ID, q.Position); err != nil {
		return err
	}
	_, err := fmt.Fprintf(t.app.stderr, "skein queue%s lists the queue; skein queue rm%s %s withdraws it\n", sessionFlag(t.session), sessionFlag(t.session), q.ID)
	return err
}
