package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

// stateChange is an SSE `event: state` (docs/API.md, "Turn state"): a
// change of the session's state, with the sequence of the record that
// caused it.
type stateChange struct {
	Sequence   uint64 `json:"sequence"`
	Change     string `json:"change"`
	Status     string `json:"status"`
	TurnID     string `json:"turnId"`
	StopReason string `json:"stopReason"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	DiscardDeltas bool `json:"discardDeltas"`
	WaitingFor    *struct {
		Kind      string `json:"kind"`
		RequestID string `json:"requestId"`
	} `json:"waitingFor"`
}

// The state changes a viewer acts on.
const (
	changeTurnAccepted = "turn_accepted"
	changeTurnFinished = "turn_finished"
	changeWaiting      = "waiting"
	changeUnloaded     = "unloaded"
	changeAdapterExit  = "adapter_exited"
	changeStalled      = "stalled"
	changeResumed      = "resumed"
)

// sseState is the SSE event name of a state change.
const sseState = "state"

// feed is a session's event stream that outlives the gateway: when the
// stream ends (the gateway stopped, or this client fell behind) or the
// gateway cannot be reached, it connects again after the last durable
// event it delivered, with a growing pause, and dedupes the state events
// the new stream repeats. It stops at ctx's end or at an error no
// reconnecting cures (no such session, no token), which Err then holds.
type feed struct {
	cl     *client
	sid    string
	events chan sseEvent // closed when the feed stops
	note   func(string)  // told of an outage and of the reconnect; may be nil
	err    error         // why the feed stopped, read after events is closed
}

// openFeed opens the session's stream after the durable sequence after and
// returns once the gateway answered, as client.events does: from then on,
// nothing the session does is missed.
func (c *client) openFeed(ctx context.Context, sid string, after uint64, note func(string)) (*feed, error) {
	stream, err := c.events(ctx, sid, after)
	if err != nil {
		return nil, err
	}
	f := &feed{cl: c, sid: sid, events: make(chan sseEvent), note: note}
	go f.run(ctx, stream, after)
	return f, nil
}

// Err returns why the feed stopped: nil at ctx's end.
func (f *feed) Err() error { return f.err }

// maxPause is the longest pause between two attempts to reconnect.
const maxPause = 2 * time.Second

func (f *feed) run(ctx context.Context, stream *eventStream, after uint64) {
	defer close(f.events)
	var lastState uint64
	outage := false
	for attempt := 0; ; {
		if stream != nil {
			progressed, err := f.pump(ctx, stream, &after, &lastState)
			stream.Close()
			if ctx.Err() != nil {
				return
			}
			if !retryable(err) {
				f.err = err
				return
			}
			if progressed {
				attempt = 0
			}
			if !outage && f.note != nil {
				f.note(fmt.Sprintf("the event stream ended (%v); reconnecting to %s", err, f.cl.base))
			}
			outage = true
		}
		attempt++
		pause := min(time.Duration(attempt)*200*time.Millisecond, maxPause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		s, err := f.cl.events(ctx, f.sid, after)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !retryable(err) {
				f.err = err
				return
			}
			stream = nil
			continue
		}
		if outage && f.note != nil {
			f.note(fmt.Sprintf("reconnected to %s after sequence %d", f.cl.base, after))
		}
		outage = false
		stream = s
	}
}

// pump delivers a stream's events until it ends, keeping *after at the
// last durable sequence and *lastState at the last state event's.
func (f *feed) pump(ctx context.Context, s *eventStream, after, lastState *uint64) (bool, error) {
	progressed := false
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return progressed, errStreamEnded
		}
		if err != nil {
			return progressed, err
		}
		switch ev.Name {
		case "error":
			return progressed, streamError(ev)
		case eventjson.DurabilityDurable:
			seq, err := strconv.ParseUint(ev.ID, 10, 64)
			if err != nil {
				return progressed, fmt.Errorf("durable event with id %q: %w", ev.ID, err)
			}
			if seq <= *after {
				continue
			}
			*after = seq
		case sseState:
			var sc stateChange
			if decodeVisible(ev.Data, &sc) != nil {
				continue
			}
			if sc.Sequence <= *lastState {
				continue
			}
			*lastState = sc.Sequence
			if ev.ID != "" {
				// A control record's change carries the cursor itself.
				if seq, err := strconv.ParseUint(ev.ID, 10, 64); err == nil && seq > *after {
					*after = seq
				}
			}
		case eventjson.DurabilityEphemeral:
		default:
			continue // an event this client does not know
		}
		progressed = true
		select {
		case f.events <- ev:
		case <-ctx.Done():
			return progressed, ctx.Err()
		}
	}
}

// errStreamEnded is a stream the gateway closed without an error event.
var errStreamEnded = errors.New("the gateway ended the event stream")

// retryable reports whether a stream's end is cured by connecting again:
// the gateway went away, ended the stream, or said it is unavailable.
func retryable(err error) bool {
	if errors.Is(err, errStreamEnded) || isCode(err, string(events.CodeUnavailable)) {
		return true
	}
	if _, ok := errors.AsType[*UnreachableError](err); ok {
		return true
	}
	if e, ok := errors.AsType[*APIError](err); ok {
		return e.Status == 502 || e.Status == 503 || e.Status == 504
	}
	// A read that failed mid-stream: the connection was reset or closed.
	return err != nil && !errors.Is(err, context.Canceled) && !isAPIError(err)
}

func isAPIError(err error) bool {
	_, ok := errors.AsType[*APIError](err)
	return ok
}
