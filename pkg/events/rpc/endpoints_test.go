package rpc_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// startEndpoints starts a service of one endpoint serving h on the API
// subject of OpGetSession; Stop is the test's to call.
func startEndpoints(t *testing.T, nc *nats.Conn, async bool, h rpc.OpHandler) *rpc.Endpoints {
	t.Helper()
	eps, err := rpc.StartEndpoints(t.Context(), nc, slog.New(slog.NewTextHandler(t.Output(), nil)), rpc.ServiceConfig{Config: micro.Config{Name: "skein-test"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := eps.Add(rpc.Endpoint{Name: "get", Subject: events.APIWildcard(events.OpGetSession), Handler: h, Async: async}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return eps
}

// call sends one request for sid and returns the channel its outcome
// arrives on.
func call(t *testing.T, nc *nats.Conn, sid string) <-chan error {
	out := make(chan error, 1)
	go func() {
		_, err := rpc.Request(t.Context(), nc, events.APISubject("ns1", events.OpGetSession), &events.AcpGetSessionStateRequest{SessionID: sid}, nil)
		out <- err
	}()
	return out
}

// TestEndpointsStopWaitsForHandlers: Stop returns only after every handler
// in flight has returned, synchronous or not. A handler still running once
// the bound passed sees its context end, and its caller is told to retry.
func TestEndpointsStopWaitsForHandlers(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(map[bool]string{false: "sync", true: "async"}[async], func(t *testing.T) {
			nc := natstest.Connect(t, natstest.Run(t))
			entered := make(chan struct{})
			var returned atomic.Bool
			eps := startEndpoints(t, nc, async, func(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
				defer returned.Store(true)
				close(entered)
				<-ctx.Done()
				return nil, ctx.Err()
			})
			reply := call(t, nc, "s1")
			<-entered
			if eps.Stop(0) {
				t.Error("Stop(0) = true with a handler blocked, want false")
			}
			if !returned.Load() {
				t.Fatal("Stop returned before the handler in flight")
			}
			if err := <-reply; !errors.Is(err, &events.Error{Code: events.CodeUnavailable}) {
				t.Errorf("reply of a request cut short by Stop = %v, want %s", err, events.CodeUnavailable)
			}
		})
	}
}

// TestEndpointsStopDrains: a handler that finishes within Stop's bound
// finishes undisturbed, and its caller gets its answer.
func TestEndpointsStopDrains(t *testing.T) {
	nc := natstest.Connect(t, natstest.Run(t))
	entered, release := make(chan struct{}), make(chan struct{})
	eps := startEndpoints(t, nc, true, func(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
		close(entered)
		select {
		case <-release:
			return &events.AcpSessionStateResponse{}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	reply := call(t, nc, "s1")
	<-entered
	stopped := make(chan bool, 1)
	go func() { stopped <- eps.Stop(time.Hour) }()
	close(release)
	if !<-stopped {
		t.Error("Stop = false, want true: the handler finished within the bound")
	}
	if err := <-reply; err != nil {
		t.Errorf("reply of a request drained by Stop = %v, want its answer", err)
	}
}

// TestEndpointsRequestHeaders: a handler reads its request's headers from
// its context, and an endpoint may find the namespace itself.
func TestEndpointsRequestHeaders(t *testing.T) {
	nc := natstest.Connect(t, natstest.Run(t))
	eps, err := rpc.StartEndpoints(t.Context(), nc, slog.New(slog.NewTextHandler(t.Output(), nil)), rpc.ServiceConfig{Config: micro.Config{Name: "skein-test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer eps.Stop(0)
	type seen struct {
		ns  events.Namespace
		sid string
	}
	got := make(chan seen, 1)
	err = eps.Add(rpc.Endpoint{
		Name: "headers", Subject: "skein.test.headers",
		Namespace: func(req micro.Request) (events.Namespace, error) {
			return events.ParseNamespace(req.Headers().Get(events.HeaderNamespace))
		},
		Handler: func(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
			got <- seen{ns, rpc.RequestHeaders(ctx).Get(events.HeaderSessionID)}
			return &events.AcpSessionStateResponse{}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	hdr := nats.Header{events.HeaderNamespace: {"ns2"}, events.HeaderSessionID: {"s2"}}
	if _, err := rpc.Request(t.Context(), nc, "skein.test.headers", &events.AcpGetSessionStateRequest{SessionID: "s2"}, hdr); err != nil {
		t.Fatal(err)
	}
	if s, want := <-got, (seen{"ns2", "s2"}); s != want {
		t.Errorf("handler saw %+v, want %+v", s, want)
	}
}
