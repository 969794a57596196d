package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

// asker answers a turn's permission requests with choices typed on the
// terminal. The printer shows every request with its options and the
// skein respond command that answers it; the asker keeps the requests that
// are still pending and, when it has input, asks about the oldest one.
//
// Questions and notes go to standard error, so that standard output stays
// the turn's transcript.
type asker struct {
	t     *turn
	p     *printer        // paused while a question waits for its answer
	input io.Reader       // nil: show requests, never ask
	done  <-chan struct{} // closed when the command no longer reads lines
	lines chan string     // lines typed: nil until the first question, closed at the end of input; see next

	pending []*pendingRequest // permission requests shown and not yet resolved, oldest first
	// cancelling is set by a Ctrl-C: the turn is being cancelled, and its
	// requests end with it, unanswered.
	cancelling bool
}

// interrupted stops asking: a Ctrl-C cancels the turn, whose pending
// requests then end as prompt_cancelled.
func (a *asker) interrupted() {
	if a.cancelling {
		return
	}
	a.cancelling = true
	if a.lines != nil && len(a.pending) > 0 {
		a.note("\n")
	}
	a.p.resume()
}

// pendingRequest is a permission request the turn waits on.
type pendingRequest struct {
	id      string
	options []permissionOption
}

// observe follows the durable permission events of the turn.
func (a *asker) observe(e *event) {
	switch e.Type {
	case eventjson.TypePermissionRequest:
		a.pending = append(a.pending, &pendingRequest{id: e.RequestID, options: e.permissionOptions()})
		if len(a.pending) == 1 {
			a.ask()
		}
	case eventjson.TypePermissionResponse:
		// Answered here, elsewhere, or ended by a cancel or a failure.
		i := slices.IndexFunc(a.pending, func(p *pendingRequest) bool { return p.id == e.RequestID })
		if i < 0 {
			return
		}
		a.pending = slices.Delete(a.pending, i, i+1)
		if i == 0 && len(a.pending) > 0 {
			a.ask()
		} else if len(a.pending) == 0 {
			a.p.resume()
		}
	}
}

// ask asks about the oldest pending request, reading input from now on.
func (a *asker) ask() {
	if a.input == nil || a.cancelling {
		return
	}
	a.p.pause()
	if a.lines == nil {
		a.read()
	}
	req := a.pending[0]
	a.note("choice for %s [1-%d or option ID]: ", req.id, len(req.options))
}

// next returns the channel of lines typed while a question is pending, and
// nil (which never delivers) otherwise: a line typed ahead answers the
// next question, whenever it comes.
func (a *asker) next() <-chan string {
	if len(a.pending) == 0 || a.cancelling {
		return nil
	}
	return a.lines
}

// read starts the goroutine that sends each line of input to a.lines.
func (a *asker) read() {
	lines := make(chan string)
	a.lines = lines
	in, done := a.input, a.done
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-done:
				return
			}
		}
	}()
}

// answer handles one line typed (ok) or the end of input (!ok): it
// answers the oldest pending request with the option the line names. Only
// ctx's end is an error; a failed answer is reported and asked again.
func (a *asker) answer(ctx context.Context, line string, ok bool) error {
	if !ok {
		a.lines, a.input = nil, nil // no more questions
		if len(a.pending) > 0 {
			a.note("\nend of input: answer with skein respond\n")
		}
		a.p.resume()
		return nil
	}
	if len(a.pending) == 0 {
		return nil // next delivers only while a request is pending
	}
	req := a.pending[0]
	optionID, found := choose(req.options, strings.TrimSpace(line))
	if !found {
		if strings.TrimSpace(line) != "" {
			a.note("%q is not one of the options\n", line)
		}
		a.ask()
		return nil
	}
	resp, err := a.t.cl.respond(ctx, a.t.session, req.id, optionID)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("respond to %s: %w", req.id, err)
		}
		a.note("respond to %s: %v\n", req.id, err)
		a.ask()
		return nil
	}
	if resp.Status != events.PermissionAccepted {
		a.note("%s\n", describeAnswer(resp))
	}
	// The request is resolved either way; its permission_response event,
	// if it is still to come, finds nothing pending.
	a.pending = slices.DeleteFunc(a.pending, func(p *pendingRequest) bool { return p == req })
	if len(a.pending) > 0 {
		a.ask()
	} else {
		a.p.resume()
	}
	return nil
}

// choose returns the option ID that s names: the number of an option as
// printed (from 1), else an option ID itself.
func choose(options []permissionOption, s string) (string, bool) {
	if n, err := strconv.Atoi(s); err == nil && n >= 1 && n <= len(options) {
		return options[n-1].OptionID, true
	}
	for _, o := range options {
		if o.OptionID == s && s != "" {
			return o.OptionID, true
		}
	}
	return "", false
}

// note writes a question or a diagnostic to standard error. A failed write
// is not worth failing the turn for.
func (a *asker) note(format string, args ...any) {
	_, _ = fmt.Fprintf(a.t.app.stderr, format, args...)
}
