package session_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session"
)

func (h *harness) discard(ctx context.Context, sid string) error {
	_, err := rpc.Call[events.DiscardSessionResponse](ctx, h.nc, events.APISubject("default", events.OpDiscardSession),
		&events.DiscardSessionRequest{SessionID: &sid}, nil)
	return err
}

// Discard deletes a session opened and never prompted, and refuses one
// that holds a user message, or runs a turn, with session_not_empty,
// changing nothing.
func TestDiscard(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "fresh", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := h.discard(ctx, "fresh"); err != nil {
		t.Fatalf("discard of an unused session: %v", err)
	}
	if got := h.controlRecords(t, "fresh"); len(got) != 1 || got[0] != events.RecordSessionDeleted {
		t.Errorf("control records after discard = %v, want only the tombstone", got)
	}
	if _, err := h.prompt(ctx, "fresh", "", "say hi"); code(err) != events.CodeSessionNotFound {
		t.Errorf("prompt after discard = %v, want %s", err, events.CodeSessionNotFound)
	}
	if err := h.discard(ctx, "never-opened"); err != nil {
		t.Errorf("discard of a missing session = %v, want nil", err)
	}

	if err := h.open(t, "used", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "used", "", "say kept"); err != nil {
		t.Fatal(err)
	}
	before, _, err := eventlog.LoadPosition(ctx, h.js, "default", "used")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.discard(ctx, "used"); code(err) != events.CodeSessionNotEmpty {
		t.Fatalf("discard of a prompted session = %v, want %s", err, events.CodeSessionNotEmpty)
	}
	after, _, err := eventlog.LoadPosition(ctx, h.js, "default", "used")
	if err != nil {
		t.Fatal(err)
	}
	if after.LastSeq != before.LastSeq {
		t.Errorf("a refused discard wrote to the log: last sequence %d, was %d", after.LastSeq, before.LastSeq)
	}
	if _, err := h.prompt(ctx, "used", "", "say still here"); err != nil {
		t.Errorf("prompt after a refused discard: %v", err)
	}
}

// Discard against a prompt, 200 times: exactly one wins, as the log says.
// Either the discard's tombstone is the session's only record and the
// prompt found no session, or the prompt's turn is in the log, no
// tombstone is, and the discard was refused session_not_empty.
func TestDiscardRacesPrompt(t *testing.T) {
	h := startRig(t, session.Config{})
	n := iterations(200)
	sids := []string{"race-a", "race-b", "race-c", "race-d"}
	var mu sync.Mutex
	wins := map[string]int{}
	parallelLoops(t, sids, n, func(base string, i int) error {
		ctx := t.Context()
		sid := fmt.Sprintf("%s-%d", base, i)
		if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
			return err
		}
		var (
			wg              sync.WaitGroup
			promptErr, dErr error
		)
		wg.Go(func() { _, promptErr = h.accept(ctx, sid, "", "say raced") })
		wg.Go(func() { dErr = h.discard(ctx, sid) })
		wg.Wait()
		// The reads are retried: on a loaded machine one direct get may
		// outlast its own deadline, which says nothing of the race.
		recs, err := retried(func() ([]*eventlog.Record, error) { return lifecycle(ctx, h.js, events.SessionID(sid)) })
		if err != nil {
			return err
		}
		deleted := len(recs) > 0 && recs[len(recs)-1].Header.Get(events.HeaderRecord) == events.RecordSessionDeleted
		evs, err := retried(func() ([]*eventlog.Record, error) {
			return eventlog.Forward(ctx, h.js, events.StreamLog, events.LogSubject("default", events.SessionID(sid), events.LogEvents), 0, 10)
		})
		if err != nil {
			return err
		}
		accepted := false
		for _, r := range evs {
			if r.Header.Get(events.HeaderTurnAccepted) != "" {
				accepted = true
			}
		}
		switch {
		case deleted && !accepted:
			if dErr != nil || code(promptErr) != events.CodeSessionNotFound {
				return fmt.Errorf("the log says discard won, but discard = %v and prompt = %v", dErr, promptErr)
			}
			if len(recs) != 1 {
				return fmt.Errorf("discard won, yet %d control records remain", len(recs))
			}
			mu.Lock()
			wins["discard"]++
			mu.Unlock()
		case accepted && !deleted:
			if promptErr != nil || code(dErr) != events.CodeSessionNotEmpty {
				return fmt.Errorf("the log says the prompt won, but prompt = %v and discard = %v", promptErr, dErr)
			}
			mu.Lock()
			wins["prompt"]++
			mu.Unlock()
		default:
			return fmt.Errorf("log: deleted %v, turn accepted %v (prompt %v, discard %v); want exactly one", deleted, accepted, promptErr, dErr)
		}
		if !deleted {
			// Its adapter stops, so the runner's capacity holds.
			return h.delete(ctx, sid)
		}
		return nil
	})
	t.Logf("wins over %d races: %v", n, wins)
}

// retried runs read up to five times, until it succeeds.
func retried(read func() ([]*eventlog.Record, error)) ([]*eventlog.Record, error) {
	var err error
	for range 5 {
		var recs []*eventlog.Record
		if recs, err = read(); err == nil {
			return recs, nil
		}
	}
	return nil, err
}
