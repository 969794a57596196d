package session_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// A replica whose lease is taken from it mid-turn steps down: nothing more
// is written, and the waiting prompt, which reads the log, waits on. The
// retry finds the
// lease held by a replica that does not answer, evicts it, takes the
// session back (fencing the log) and joins the turn, which the adapter
// never stopped working on. A replica that stops gives its leases up.
func TestLeaseLostStepsDown(t *testing.T) {
	h := startRig(t, session.Config{OwnerTTL: time.Second})
	ctx := t.Context()
	if err := h.open(t, "ls", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	owners, err := h.js.KeyValue(ctx, events.BucketOwners)
	if err != nil {
		t.Fatal(err)
	}
	held, err := owners.Get(ctx, "default.ls")
	if err != nil {
		t.Fatalf("lease after open: %v", err)
	}
	script := "chunks 2 before\npause ls\nsay after"
	first := h.promptAsync(ctx, "ls", "key-1", script)
	if err := testagent.WaitPaused(ctx, h.control, "ls"); err != nil {
		t.Fatal(err)
	}
	if _, err := owners.Put(ctx, "default.ls", []byte("vanished-replica")); err != nil {
		t.Fatal(err)
	}
	// The replica notices at its next renewal and steps down. The first
	// prompt's caller waits on the log, not on the replica: it is not told
	// anything, and gets the turn's outcome when whoever owns it next
	// finishes it.
	if err := testutil.Poll(ctx, "the replica to step down", func() (bool, error) {
		return testutil.Metric(t, h.reg, "acp_session_owner_leases_total", "event", "lost") == 1, nil
	}); err != nil {
		t.Fatal(err)
	}

	retry := h.promptAsync(ctx, "ls", "key-1", script)
	if err := testagent.Release(ctx, h.control, "ls"); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan promptResult{"the prompt in flight": first, "the keyed retry": retry} {
		r := <-ch
		if r.err != nil || r.res.StopReason != "end_turn" || !strings.Contains(string(r.res.Message), "after") {
			t.Fatalf("%s = %+v, %v; want the turn completed", name, r.res, r.err)
		}
	}
	if n := testutil.Metric(t, h.reg, "acp_session_owner_leases_total", "event", "evicted"); n != 1 {
		t.Errorf("leases evicted = %v, want 1", n)
	}
	if d := h.dispatches(); d != 1 {
		t.Errorf("dispatches = %v, want 1 (the turn was joined, not sent again)", d)
	}
	if e, err := owners.Get(ctx, "default.ls"); err != nil || string(e.Value()) != string(held.Value()) {
		t.Errorf("lease after the retry = %v, %v; want this replica's again", e, err)
	}
	log, _ := h.readLog(t, "ls") // audits: one finish, nothing twice
	if got := log.Outcomes(); len(got) != 1 || got[0] != events.OutcomeCompleted {
		t.Errorf("outcomes = %v, want one completed turn", got)
	}
	if n, err := h.countCtl(ctx, "ls", "OwnerChanged"); err != nil || n != 1 {
		t.Errorf("OwnerChanged records = %d, %v; want 1 (the retaking)", n, err)
	}

	h.stopSvc()
	if _, err := owners.Get(ctx, "default.ls"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("lease after the replica stopped: %v, want it given up", err)
	}
}

// The owner goes mid-turn while another replica runs, with no request to
// prompt the survivor: it dies (its connection closes without a word, as
// after kill -9; the survivor notices its lease expire) or it stops (a
// deploy: it gives its leases up, and the survivor claims at once). Either
// way the survivor takes the turn over, it completes, and a keyed retry,
// wherever it lands, gets it.
func TestSurvivorTakesOverWithoutARequest(t *testing.T) {
	for _, end := range []string{"dies", "stops"} {
		t.Run("owner="+end, func(t *testing.T) {
			h := startRig(t, session.Config{OwnerTTL: time.Second})
			h.stopSvc()
			ctx := t.Context()
			cfg := session.Config{OwnerTTL: time.Second, DrainWait: 100 * time.Millisecond}
			owner := startReplica(t, h.connect(), cfg, h.lg)
			if err := h.open(t, "sv", events.AcpOpenSessionRequest{}); err != nil {
				t.Fatal(err)
			}
			survivor := startReplica(t, h.connect(), cfg, h.lg)
			script := "chunks 2 before\npause sv\nsay after"
			_ = h.promptAsync(ctx, "sv", "key-1", script) // its answer goes with the owner
			if err := testagent.WaitPaused(ctx, h.control, "sv"); err != nil {
				t.Fatal(err)
			}
			if end == "dies" {
				owner.die()
			} else {
				owner.stop()
			}
			if err := testutil.Poll(ctx, "the survivor to take the turn over", func() (bool, error) {
				return testutil.Metric(t, survivor.reg, "acp_session_takeovers_total") == 1, nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := testagent.Release(ctx, h.control, "sv"); err != nil {
				t.Fatal(err)
			}
			res, err := h.prompt(ctx, "sv", "key-1", script)
			if err != nil || res.StopReason != "end_turn" || !strings.Contains(string(res.Message), "after") {
				t.Fatalf("keyed retry = %+v, %v; want the turn completed", res, err)
			}
			log, _ := h.readLog(t, "sv")
			if got := log.Outcomes(); len(got) != 1 || got[0] != events.OutcomeCompleted {
				t.Errorf("outcomes = %v, want one completed turn", got)
			}
			if d := testutil.Metric(t, survivor.reg, "acp_session_prompt_dispatches_total"); d != 0 {
				t.Errorf("the survivor dispatched %v prompts, want 0", d)
			}
			// The survivor counts the turn's end, but does not time a turn
			// that started on another replica.
			if err := testutil.Poll(ctx, "the survivor to count the turn", func() (bool, error) {
				return testutil.Metric(t, survivor.reg, "acp_session_prompts_total", "outcome", "completed", "stop_reason", "end_turn") == 1, nil
			}); err != nil {
				t.Error(err)
			}
			for _, h := range []string{"acp_session_turn_finished_seconds", "acp_session_turn_first_reply_seconds"} {
				if n := testutil.Metric(t, survivor.reg, h); n != 0 {
					t.Errorf("the survivor observed %v in %s, want none", n, h)
				}
			}
		})
	}
}
