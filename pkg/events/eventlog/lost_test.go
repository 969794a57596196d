package eventlog_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/streams"
)

// A direct get nobody answers (its replica died with it, or was catching
// up after a restart) costs a read one short attempt, not the caller's
// whole deadline: the read asks again and gets its answer. Here a relay
// in front of the JetStream API drops every first request it sees and
// passes the others on to the server, which answers the reader directly.
func TestReadsAskAgainAfterALostRequest(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(t.Context(), js, streams.Options{}, true); err != nil {
		t.Fatal(err)
	}
	w := eventlog.NewWriter(js, "default", "s1", eventlog.Position{}, "w1")
	if _, err := w.Append(t.Context(), update("a"), update("b"), update("c")); err != nil {
		t.Fatal(err)
	}

	const prefix = "$RELAY.API."
	var seen atomic.Int64
	relay, err := nc.Subscribe(prefix+"DIRECT.GET.>", func(m *nats.Msg) {
		if seen.Add(1)%2 == 1 {
			return // lost
		}
		_ = nc.PublishRequest(strings.Replace(m.Subject, prefix, "$JS.API.", 1), m.Reply, m.Data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Unsubscribe()
	// The reader has a connection of its own: its first request must not
	// reach the server before the relay's interest does.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	rjs, err := jetstream.NewWithAPIPrefix(natstest.Connect(t, ns), prefix)
	if err != nil {
		t.Fatal(err)
	}

	// A deadline far beyond the attempts: a read that waited for it would
	// fail the test by its error.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	subject := events.LogSubject("default", "s1", events.LogEvents)
	last, err := eventlog.Last(ctx, rjs, events.StreamLog, subject)
	if err != nil || last == nil || eventlog.EventNo(last) != 3 {
		t.Fatalf("Last over a lost request = %+v, %v; want event 3", last, err)
	}
	recs, err := eventlog.Forward(ctx, rjs, events.StreamLog, subject, 0, 10)
	if err != nil || len(recs) != 3 {
		t.Fatalf("Forward over a lost request = %d records, %v; want 3", len(recs), err)
	}
	if got := seen.Load(); got != 4 {
		t.Errorf("the relay saw %d requests, want 4 (each read asked twice)", got)
	}
}
