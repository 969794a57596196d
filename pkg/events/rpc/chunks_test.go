package rpc_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// replyWait bounds a request whose reply is sent at once or never.
const replyWait = 10 * time.Second

// bigPage is a history page of one event of n bytes of text.
func bigPage(n int) *events.AcpHistoryPageResponse {
	text := strings.Repeat("x", n)
	return &events.AcpHistoryPageResponse{Events: []events.AcpDurableHistoryEntry{{
		SessionID: "s1", Sequence: 7, Timestamp: "2026-01-01T00:00:00Z", EventNo: 1,
		Event: events.Union[events.AcpDurableEvent]{V: &events.AcpDurableSessionUpdate{
			Update: events.JSON(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + text + `"}}`)}},
	}}}
}

// logBuffer is a slog handler's output, safe to read while the service
// writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A reply larger than one NATS message carries fails the request at once,
// typed payload_too_large, and is logged; a requester that accepts
// chunked replies (CallChunked) gets it whole, in chunks. Both for
// handlers answered through micro and for those answered by publishing.
func TestReplyLargerThanMaxPayload(t *testing.T) {
	const maxPayload = 64 << 10
	for _, async := range []bool{false, true} {
		t.Run(map[bool]string{false: "sync", true: "async"}[async], func(t *testing.T) {
			nc := natstest.Connect(t, natstest.Run(t, natstest.WithMaxPayload(maxPayload)))
			var logs logBuffer
			eps, err := rpc.StartEndpoints(t.Context(), nc, slog.New(slog.NewTextHandler(&logs, nil)), rpc.ServiceConfig{Config: micro.Config{Name: "skein-test"}})
			if err != nil {
				t.Fatal(err)
			}
			defer eps.Stop(0)
			for name, size := range map[string]int{"small": 100, "large": 3*maxPayload + 5} {
				page := bigPage(size)
				if err := eps.Add(rpc.Endpoint{Name: name, Subject: "test." + name, Async: async,
					Handler:   func(context.Context, events.Namespace, []byte) (events.Variant, error) { return page, nil },
					Namespace: func(req micro.Request) (events.Namespace, error) { return "", nil },
				}); err != nil {
					t.Fatal(err)
				}
			}
			if err := eps.Listening(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), replyWait)
			defer cancel()
			_, err = rpc.Call[events.AcpHistoryPageResponse](ctx, nc, "test.large", &events.AcpGetSessionStateRequest{SessionID: "s1"}, nil)
			if e := events.AsError(err); e == nil || e.Code != events.CodePayloadTooLarge {
				t.Fatalf("a reply larger than max_payload = %v, want %s at once", err, events.CodePayloadTooLarge)
			}
			if !strings.Contains(logs.String(), "reply too large") {
				t.Errorf("the unsendable reply was not logged; log:\n%s", logs.String())
			}
			for name, size := range map[string]int{"small": 100, "large": 3*maxPayload + 5} {
				got, err := rpc.CallChunked[events.AcpHistoryPageResponse](ctx, nc, "test."+name, &events.AcpGetSessionStateRequest{SessionID: "s1"}, nil)
				if err != nil {
					t.Fatalf("CallChunked %s: %v", name, err)
				}
				want, _ := events.Marshal(bigPage(size))
				if body, _ := events.Marshal(got); !bytes.Equal(body, want) {
					t.Errorf("CallChunked %s: a reply of %d bytes, want the %d sent", name, len(body), len(want))
				}
			}
		})
	}
}

// A chunked request to a subject nobody serves is unavailable.
func TestCallChunkedNoResponders(t *testing.T) {
	nc := natstest.Connect(t, natstest.Run(t))
	ctx, cancel := context.WithTimeout(t.Context(), replyWait)
	defer cancel()
	_, err := rpc.CallChunked[events.AcpHistoryPageResponse](ctx, nc, "test.nobody", &events.AcpGetSessionStateRequest{SessionID: "s1"}, nats.Header{})
	if e := events.AsError(err); e == nil || e.Code != events.CodeUnavailable {
		t.Errorf("CallChunked to nobody = %v, want %s", err, events.CodeUnavailable)
	}
}

// A request of the API that reached no service is sent again, within
// rpc.NoRespondersGrace: a service whose subscription the server learns of
// after the first attempt (a service starting, its interest crossing the
// cluster's routes) answers it. One to an instance's subject is not.
func TestNoRespondersSentAgain(t *testing.T) {
	srv := natstest.Run(t)
	for _, chunked := range []bool{false, true} {
		t.Run(map[bool]string{false: "Call", true: "CallChunked"}[chunked], func(t *testing.T) {
			nc, svc := natstest.Connect(t, srv), natstest.Connect(t, srv)
			subject := events.APISubject("late", events.Op("op"+strconv.FormatBool(chunked)))
			in, out := nc.Stats().InMsgs, nc.Stats().OutMsgs
			errc := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(t.Context(), replyWait)
				defer cancel()
				req := &events.AcpGetSessionStateRequest{SessionID: "s1"}
				var err error
				if chunked {
					_, err = rpc.CallChunked[events.AcpSessionStateResponse](ctx, nc, subject, req, nil)
				} else {
					_, err = rpc.Call[events.AcpSessionStateResponse](ctx, nc, subject, req, nil)
				}
				errc <- err
			}()
			// The service subscribes once the first attempt's answer, no
			// responders, is back: what follows is a second attempt.
			testutil.Eventually(t, "the first attempt answered by no responders", func() bool { return nc.Stats().InMsgs > in })
			sub, err := svc.Subscribe(subject, func(m *nats.Msg) {
				body, _ := events.Marshal(&events.AcpSessionStateResponse{})
				_ = m.Respond(body)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := svc.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatalf("a request to a service that subscribed after its first attempt = %v, want its answer", err)
			}
			if sent := nc.Stats().OutMsgs - out; sent < 2 {
				t.Errorf("the request was sent %d times, want at least 2", sent)
			}
		})
	}
}

// A request to one instance's subject that reached nobody is unavailable
// at once, sent once: nobody answering means the instance is gone.
func TestNoRespondersInstanceOnce(t *testing.T) {
	nc := natstest.Connect(t, natstest.Run(t))
	out := nc.Stats().OutMsgs
	_, err := rpc.Call[events.AcpSessionStateResponse](t.Context(), nc, events.OwnerSubject("gone", "default", events.OpGetSession), &events.AcpGetSessionStateRequest{SessionID: "s1"}, nil)
	if e := events.AsError(err); e == nil || e.Code != events.CodeUnavailable {
		t.Errorf("Call to a gone instance = %v, want %s", err, events.CodeUnavailable)
	}
	if sent := nc.Stats().OutMsgs - out; sent != 1 {
		t.Errorf("the request was sent %d times, want 1", sent)
	}
}

// CallAgain sends again a request whose answer never came, once its
// attempt's bound passed, and returns the answer to the next; an error the
// service answered that says nothing of retrying comes back at once.
func TestCallAgainAfterLostAnswer(t *testing.T) {
	srv := natstest.Run(t)
	nc, svc := natstest.Connect(t, srv), natstest.Connect(t, srv)
	subject := events.APISubject("lost", events.OpGetSession)
	var mu sync.Mutex
	seen := 0
	sub, err := svc.Subscribe(subject, func(m *nats.Msg) {
		mu.Lock()
		seen++
		n := seen
		mu.Unlock()
		if n == 1 {
			return // the first request is lost, as with a node that died holding it
		}
		body, _ := events.Marshal(&events.AcpSessionStateResponse{})
		_ = m.Respond(body)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := svc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), replyWait)
	defer cancel()
	req := &events.AcpGetSessionStateRequest{SessionID: "s1"}
	if _, err := rpc.CallAgain[events.AcpSessionStateResponse](ctx, nc, subject, req, nil, 200*time.Millisecond); err != nil {
		t.Fatalf("a request whose first answer was lost = %v, want the second's answer", err)
	}
	mu.Lock()
	if seen != 2 {
		t.Errorf("the service saw the request %d times, want 2", seen)
	}
	mu.Unlock()

	refused := events.APISubject("lost", events.OpDeleteSession)
	sub2, err := svc.Subscribe(refused, func(m *nats.Msg) {
		body, _ := events.Marshal(events.ErrSessionNotFound.Response())
		_ = m.RespondMsg(&nats.Msg{Data: body, Header: nats.Header{
			micro.ErrorCodeHeader: []string{string(events.CodeSessionNotFound)},
			micro.ErrorHeader:     []string{"no such session"},
		}})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Unsubscribe()
	if err := svc.Flush(); err != nil {
		t.Fatal(err)
	}
	in := svc.Stats().InMsgs
	_, err = rpc.CallAgain[events.AcpSessionStateResponse](ctx, nc, refused, req, nil, time.Second)
	if !errors.Is(err, events.ErrSessionNotFound) {
		t.Fatalf("a request the service refused = %v, want session_not_found", err)
	}
	if got := svc.Stats().InMsgs - in; got != 1 {
		t.Errorf("a refused request was sent %d times, want once", got)
	}
}
