package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
)

// turn is one `skein prompt`.
type turn struct {
	app     *app
	cl      *client
	session string
	agent   string
	policy  *string // of a session the turn opens
	key     *string
	// attach names the uploads the prompt references (files.go).
	attach []string
	// input, when set, is where the user types answers to permission
	// requests. It is read from the first request on by a goroutine that
	// returns at the end of input or when it has a line no one wants
	// anymore: a read that blocks (a terminal) outlives the command.
	input io.Reader
}

// promptResult is what the prompt request came back with.
type promptResult struct {
	resp *promptResponse
	err  error
}

// run opens the session if needed, subscribes to its events after its
// latest sequence, sends the prompt, and prints the events of the turn as
// they stream. When the prompt returns, it catches up on any durable event
// the stream had not delivered yet, from history, so the printed reply is
// complete however the stream fared.
func (t *turn) run(ctx context.Context, text string) error {
	info, err := t.cl.session(ctx, t.session)
	if isCode(err, string(events.CodeSessionNotFound)) {
		if err := t.cl.open(ctx, t.session, openRequest{Agent: t.agent, PermissionPolicy: t.policy}); err != nil {
			return fmt.Errorf("open %s: %w", t.session, err)
		}
		info, err = t.cl.session(ctx, t.session)
	}
	if err != nil {
		return fmt.Errorf("session %s: %w", t.session, err)
	}

	sctx, stop := context.WithCancel(ctx)
	defer stop()
	stream, err := t.cl.events(sctx, t.session, info.LatestSequence)
	if err != nil {
		return fmt.Errorf("events of %s: %w", t.session, err)
	}
	incoming := make(chan sseEvent)
	streamDone := make(chan struct{})
	go func() {
		defer close(streamDone)
		defer close(incoming)
		for {
			ev, err := stream.Next()
			if err != nil {
				return // EOF, or the stream was stopped: the prompt's return decides
			}
			select {
			case incoming <- ev:
			case <-sctx.Done():
				return
			}
		}
	}()
	defer func() {
		stop()
		stream.Close() // unblocks Next
		<-streamDone
	}()

	content, err := json.Marshal(promptContent(text, t.attach))
	if err != nil {
		return fmt.Errorf("encode prompt: %w", err)
	}
	// The prompt request runs beside the loop below, which prints the
	// turn's events meanwhile. run owns it: whichever way run returns, the
	// request is cancelled (the turn goes on in the session service; only
	// the wait for it ends) and run waits for the goroutine to end.
	result := make(chan promptResult, 1)
	pctx, cancelPrompt := context.WithCancel(ctx)
	promptDone := make(chan struct{})
	go func() {
		defer close(promptDone)
		resp, err := t.cl.prompt(pctx, t.session, promptRequest{IdempotencyKey: t.key, Content: content})
		result <- promptResult{resp, err}
	}()
	defer func() {
		cancelPrompt()
		<-promptDone
	}()

	p := newPrinter(t.app.stdout)
	p.session = t.session
	asker := &asker{t: t, input: t.input, done: sctx.Done()}
	last := info.LatestSequence
	var res promptResult
	for waiting := true; waiting; {
		select {
		case ev, ok := <-incoming:
			if !ok {
				incoming = nil // the stream ended early; history fills in below
				continue
			}
			e, err := renderSSE(p, ev, &last)
			if err != nil {
				return err
			}
			if e != nil {
				asker.observe(e)
			}
		case line, ok := <-asker.next():
			if err := asker.answer(ctx, line, ok); err != nil {
				return err
			}
		case res = <-result:
			waiting = false
		}
	}
	stop() // what the stream still holds, history has
	if res.err != nil {
		if err := p.finish(); err != nil {
			return err
		}
		return fmt.Errorf("prompt %s: %w", t.session, res.err)
	}
	if err := t.catchUp(ctx, p, &last); err != nil {
		return err
	}
	if err := p.finish(); err != nil {
		return err
	}
	if res.resp.StopReason != acp.StopReasonEndTurn {
		if _, err := fmt.Fprintf(t.app.stderr, "stop reason: %s\n", res.resp.StopReason); err != nil {
			return err
		}
	}
	return nil
}

// renderSSE prints a durable or ephemeral stream event and advances *last
// past a durable one. It returns the event it printed, if any.
func renderSSE(p *printer, ev sseEvent, last *uint64) (*event, error) {
	if ev.Name != events.DurabilityDurable && ev.Name != events.DurabilityEphemeral {
		return nil, nil // an error event: the stream ends, history fills in
	}
	var e event
	if err := json.Unmarshal(ev.Data, &e); err != nil {
		return nil, fmt.Errorf("decode %s event: %w", ev.Name, err)
	}
	if ev.Name == events.DurabilityDurable {
		seq, err := strconv.ParseUint(ev.ID, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("durable event with id %q: %w", ev.ID, err)
		}
		if seq <= *last {
			return nil, nil
		}
		*last = seq
	}
	p.render(&e)
	return &e, nil
}

// catchUp prints the durable events after *last from history.
func (t *turn) catchUp(ctx context.Context, p *printer, last *uint64) error {
	for {
		after := *last
		page, err := t.cl.history(ctx, t.session, historyQuery{After: &after})
		if err != nil {
			return fmt.Errorf("history of %s: %w", t.session, err)
		}
		for _, raw := range page.Events {
			var e event
			if err := json.Unmarshal(raw, &e); err != nil {
				return fmt.Errorf("decode history event: %w", err)
			}
			if e.Sequence <= *last {
				continue
			}
			*last = e.Sequence
			p.render(&e)
		}
		if !page.HasMoreAfter {
			return nil
		}
		if *last == after {
			return errors.New("history has more events but returned none")
		}
	}
}
