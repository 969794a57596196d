package stacktest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// observer counts the requests of the API by op, from a plain
// subscription beside the services' (which never answers).
type observer struct {
	nc  *nats.Conn
	sub *nats.Subscription

	mu   sync.Mutex
	n    map[events.Op]int
	last map[events.Op]events.Variant
}

func observe(t testing.TB, nc *nats.Conn) *observer {
	t.Helper()
	o := &observer{nc: nc, n: map[events.Op]int{}, last: map[events.Op]events.Variant{}}
	var err error
	if o.sub, err = nc.SubscribeSync(events.APIWildcard("*")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.stop)
	return o
}

// drain takes in every request the server delivered before it: the flush
// makes them pending on the subscription.
func (o *observer) drain() {
	if !o.sub.IsValid() || o.nc.Flush() != nil {
		return
	}
	for {
		if n, _, _ := o.sub.Pending(); n == 0 {
			return
		}
		m, err := o.sub.NextMsg(time.Second)
		if err != nil {
			return
		}
		op := events.Op(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
		v, err := events.Unmarshal(m.Data)
		o.mu.Lock()
		o.n[op]++
		if err == nil {
			o.last[op] = v
		}
		o.mu.Unlock()
	}
}

func (o *observer) stop() {
	o.drain()
	_ = o.sub.Unsubscribe() // the connection may be closed already
	// Until the server has the unsubscription, a request may still reach
	// the observer alone and wait out its timeout.
	_ = o.nc.FlushTimeout(testutil.PollTimeout)
}

func (o *observer) calls(op events.Op) int {
	o.drain()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[op]
}

func (o *observer) lastRequest(op events.Op) events.Variant {
	o.drain()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last[op]
}

// AnswerWith serves op for every namespace on nc, answering every request
// with answer (an error, or a reply), until the test ends or stop is
// called. It stands in for a service where a test needs an answer the
// real services give only in a fault or a race, or never.
func AnswerWith(t testing.TB, nc *nats.Conn, op events.Op, answer any) (stop func()) {
	t.Helper()
	svc, err := micro.AddService(nc, micro.Config{Name: "standin", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	stop = func() { _ = svc.Stop() } // stopping twice is harmless
	t.Cleanup(stop)
	handler := micro.HandlerFunc(func(req micro.Request) {
		switch a := answer.(type) {
		case error:
			_ = rpc.RespondError(req, a)
		case events.Variant:
			_ = rpc.Respond(req, a)
		default:
			t.Errorf("AnswerWith(%s): %T is neither an error nor a reply", op, answer)
		}
	})
	if err := svc.AddEndpoint(string(op), handler, micro.WithEndpointSubject(events.APIWildcard(op))); err != nil {
		t.Fatal(err)
	}
	// The endpoint's subscription is only buffered on nc so far. A request
	// from another connection could reach the server first, and then only
	// the observer's interest: it would time out instead of being
	// answered. The flush returns once the server has the subscription.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return stop
}
