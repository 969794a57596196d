package sessionstate_test

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/sessionstate"
)

func queueRec(t *testing.T, v events.Variant, principal string) *eventlog.Record {
	t.Helper()
	data, err := events.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return &eventlog.Record{Header: nats.Header{events.HeaderPrincipal: []string{principal}}, Data: data, Time: time.Unix(1, 0)}
}

// ApplyQueue folds a queue's records: an entry queued twice (a record read
// again) is listed once, a dequeued one leaves, and positions follow the
// order; a record that does not decode is an error and changes nothing.
func TestApplyQueue(t *testing.T) {
	var q []events.QueuedPrompt
	var err error
	for _, r := range []*eventlog.Record{
		queueRec(t, &events.PromptQueued{QueueID: "q_a", Content: events.JSON(`[{"type":"text","text":"a"}]`)}, "ann"),
		queueRec(t, &events.PromptQueued{QueueID: "q_b", Content: events.JSON(`[]`)}, "bob"),
		queueRec(t, &events.PromptQueued{QueueID: "q_a", Content: events.JSON(`[]`)}, "ann"),
		queueRec(t, &events.PromptQueued{QueueID: "q_c", Content: events.JSON(`[]`)}, "cy"),
		queueRec(t, &events.PromptDequeued{QueueID: "q_a", Reason: events.DequeueStarted}, ""),
	} {
		if q, err = sessionstate.ApplyQueue(q, r); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, p := range q {
		got = append(got, p.ID+"@"+string(rune('0'+p.Position))+":"+p.Principal)
	}
	if want := []string{"q_b@1:bob", "q_c@2:cy"}; !slices.Equal(got, want) {
		t.Errorf("queue %v, want %v", got, want)
	}
	before := slices.Clone(q)
	if q, err = sessionstate.ApplyQueue(q, &eventlog.Record{Data: []byte("garbage")}); err == nil || !slices.EqualFunc(q, before, func(a, b events.QueuedPrompt) bool { return a.ID == b.ID }) {
		t.Errorf("a bad record: %v, queue %v", err, q)
	}
}
