package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session"
)

// A stale owner must not bring a deleted session's projection back, nor
// overwrite a newer owner's. Two replicas share one NATS server: A owns the
// session, then the lease is handed to B, which deletes the session or
// writes a newer projection; then A, which has not noticed, writes its own.
// A is stale in two ways: it read or wrote the projection before (its write
// is an update at that revision), or it never had one (its write is a
// create): its open was still attaching when B took over, and the attach
// finishes after B's deletion or projection.
func TestStaleOwnerProjection(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pending bool   // A's open is still attaching when B takes over
		newer   string // what B does: "delete" or "project"
	}{
		{"A projected/B deletes", false, "delete"},
		{"A projected/B projects", false, "project"},
		{"A attaching/B deletes", true, "delete"},
		{"A attaching/B projects", true, "project"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startRig(t, session.Config{OwnerTTL: time.Minute})
			h.stopSvc()
			ctx := t.Context()
			cfg := session.Config{OwnerTTL: time.Minute, DrainWait: 100 * time.Millisecond}
			fake := startFakeRunner(t, h, "gate", "gated")
			if tc.pending {
				fake.holdNextCreate()
			}
			const sid = "st"
			key := events.SessionKey("default", sid)
			openReq := events.AcpOpenSessionRequest{SessionID: new(sid), Agent: "gated"}

			a := startReplica(t, h.connect(), cfg, h.lg)
			aOpened := make(chan error, 1)
			go func() {
				_, err := rpc.Call[events.AcpOpenSessionResponse](ctx, h.nc, events.APISubject("default", events.OpOpenSession), &openReq, nil)
				aOpened <- err
			}()
			if tc.pending {
				if err := fake.waitHeld(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err := <-aOpened; err != nil {
				t.Fatalf("open on A: %v", err)
			}
			owners, err := h.js.KeyValue(ctx, events.BucketOwners)
			if err != nil {
				t.Fatal(err)
			}
			lease, err := owners.Get(ctx, key)
			if err != nil {
				t.Fatalf("A's lease: %v", err)
			}
			aID := string(lease.Value())

			startReplica(t, h.connect(), cfg, h.lg) // B
			bID, err := otherReplica(ctx, h.nc, aID)
			if err != nil {
				t.Fatal(err)
			}
			// The lease moves to B; A is not told (its next renewal is
			// minutes away) and still has the session loaded.
			if _, err := owners.Put(ctx, key, []byte(bID)); err != nil {
				t.Fatal(err)
			}
			meta, err := h.js.KeyValue(ctx, events.BucketSessions)
			if err != nil {
				t.Fatal(err)
			}
			var newer jetstream.KeyValueEntry
			switch tc.newer {
			case "delete":
				if _, err := rpc.Call[events.AcpDeleteSessionResponse](ctx, h.nc, events.OwnerSubject(bID, "default", events.OpDeleteSession),
					&events.AcpDeleteSessionRequest{SessionID: new(sid)}, nil); err != nil {
					t.Fatalf("delete on B: %v", err)
				}
				if err := h.noMeta(ctx, sid); err != nil {
					t.Fatalf("after B's delete: %v", err)
				}
			case "project":
				if _, err := rpc.Call[events.AcpOpenSessionResponse](ctx, h.nc, events.OwnerSubject(bID, "default", events.OpOpenSession), &openReq, nil); err != nil {
					t.Fatalf("open on B: %v", err)
				}
				if newer, err = meta.Get(ctx, key); err != nil {
					t.Fatalf("B's projection: %v", err)
				}
			}
			end, err := h.lastSeq(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}

			// Now A writes its projection.
			if tc.pending {
				fake.release()
				if err := <-aOpened; code(err) != events.CodeWriteConflict {
					t.Errorf("A's open, overtaken by B = %v, want %s", err, events.CodeWriteConflict)
				}
				if n := testutil.Metric(t, a.reg, "acp_session_append_conflicts_total"); n != 1 {
					t.Errorf("A counted %v append conflicts, want 1", n)
				}
			} else {
				// A serves an open of the session it believes it owns
				// without a write to the log: only the projection.
				if _, err := rpc.Call[events.AcpOpenSessionResponse](ctx, h.nc, events.OwnerSubject(aID, "default", events.OpOpenSession), &openReq, nil); err != nil {
					t.Logf("the stale open on A: %v", err)
				}
			}
			// A tried the stale write once and made none: refused as not
			// the owner (its append failed first), or on the conflict.
			var skips float64
			for _, reason := range []string{"not_owner", map[string]string{"delete": "deleted", "project": "newer"}[tc.newer]} {
				skips += testutil.Metric(t, a.reg, "acp_session_projection_skips_total", "reason", reason)
			}

			switch tc.newer {
			case "delete":
				if err := h.noMeta(ctx, sid); err != nil {
					t.Errorf("the stale owner brought the projection back: %v", err)
				}
				stored, _ := h.readLog(t, sid)
				if len(stored.Records) != 1 || stored.Records[0].Header.Get(events.HeaderRecord) != events.RecordSessionDeleted {
					t.Errorf("after the stale write the log holds %d records, want only the tombstone", len(stored.Records))
				}
				// (On B, the owner: A, until it notices, answers
				// write_conflict, "retry".)
				if _, err := rpc.Call[events.PromptAccepted](ctx, h.nc, events.OwnerSubject(bID, "default", events.OpPrompt), promptRequest(sid, "", "say zombie"), nil); code(err) != events.CodeSessionNotFound {
					t.Errorf("prompt on the deleted session = %v, want %s", err, events.CodeSessionNotFound)
				}
			case "project":
				e, err := meta.Get(ctx, key)
				if err != nil {
					t.Fatalf("the projection after the stale write: %v", err)
				}
				if e.Revision() != newer.Revision() {
					got, _ := events.Decode[events.SessionMeta](e.Value())
					want, _ := events.Decode[events.SessionMeta](newer.Value())
					t.Errorf("the stale owner overwrote the projection: revision %d (log position %d, process %s), want B's %d (log position %d, process %s)",
						e.Revision(), got.LogPosition, got.ProcessID, newer.Revision(), want.LogPosition, want.ProcessID)
				}
				h.readLog(t, sid)
			}
			if last, err := h.lastSeq(ctx, sid); err != nil || last != end {
				t.Errorf("the log's end moved from %d to %d (%v): the stale owner wrote", end, last, err)
			}
			if skips != 1 {
				t.Errorf("A skipped %v projection writes as %s, want 1", skips, tc.newer)
			}
		})
	}
}

// otherReplica returns the ID of the one session service replica other
// than not, from the replies to a nats micro ping.
func otherReplica(ctx context.Context, nc *nats.Conn, not string) (string, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return "", err
	}
	defer sub.Unsubscribe()
	ping, err := micro.ControlSubject(micro.PingVerb, events.APIServiceSession, "")
	if err != nil {
		return "", err
	}
	if err := nc.PublishRequest(ping, inbox, nil); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, testutil.PollTimeout)
	defer cancel()
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return "", fmt.Errorf("waiting for a replica other than %s: %w", not, err)
		}
		var p micro.Ping
		if err := json.Unmarshal(m.Data, &p); err != nil {
			return "", err
		}
		if p.ID != not {
			return p.ID, nil
		}
	}
}

// fakeRunner is a runner as the session service sees it: a heartbeat with
// one agent, and create and stop requests answered without a process. The
// test may hold the next create until it lets it go. A restore resumes the
// agent's session it names.
type fakeRunner struct {
	held    chan struct{} // closed when the held create has arrived
	gate    chan struct{} // closed to answer the held create
	holding atomic.Bool
	once    sync.Once
}

func startFakeRunner(t testing.TB, h *rig, id events.RunnerID, agent string) *fakeRunner {
	t.Helper()
	ctx := t.Context()
	f := &fakeRunner{held: make(chan struct{}), gate: make(chan struct{})}
	kv, err := h.js.KeyValue(ctx, events.BucketRunners)
	if err != nil {
		t.Fatal(err)
	}
	info, err := events.Marshal(&events.RunnerInfo{ID: string(id), Capacity: 100,
		Agents: []events.AcpAgentEntry{{ID: agent, Installed: true, AdapterEntrypoint: agent}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, string(id), info); err != nil {
		t.Fatal(err)
	}
	nc := h.connect()
	// It answers a ping of the runner service with its ID, as a runner
	// inside the cluster does: placement puts unplaced sessions on no
	// other (placement.go, vouched).
	if _, err := micro.AddService(nc, micro.Config{Name: events.APIServiceRunner, Version: "0.0.0",
		Metadata: map[string]string{"runner_id": string(id)}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		f.release()
		nc.Close() // no handler starts after this
		wg.Wait()
	})
	answer := func(m *nats.Msg, v events.Variant) {
		if body, err := events.Marshal(v); err == nil {
			_ = m.Respond(body) // the requester may have given up
		}
	}
	for op, serve := range map[events.RunnerOp]func(*nats.Msg){
		events.RunnerCreate: func(m *nats.Msg) {
			if f.holding.CompareAndSwap(true, false) {
				close(f.held)
				<-f.gate
			}
			answer(m, &events.AcpSessionCreatedResponse{SessionID: "fake_" + m.Header.Get(events.HeaderProcessID), ConfigOptions: []events.JSON{}})
		},
		events.RunnerRestore: func(m *nats.Msg) {
			req, err := events.Decode[events.RestoreRequest](m.Data)
			if err != nil {
				return // the requester times out; the test fails there
			}
			answer(m, &events.AdapterReady{Tier: events.TierResume, Session: events.AcpSessionCreatedResponse{SessionID: req.Resume.SessionID, ConfigOptions: []events.JSON{}}})
		},
		events.RunnerStop: func(m *nats.Msg) { answer(m, &events.RunnerAck{}) },
	} {
		// Each request on its own goroutine: a held create must not hold
		// up the others.
		if _, err := nc.Subscribe(events.RunnerSubject(id, op), func(m *nats.Msg) { wg.Go(func() { serve(m) }) }); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, nc)
	return f
}

// holdNextCreate makes the next create wait for release.
func (f *fakeRunner) holdNextCreate() { f.holding.Store(true) }

// waitHeld waits until the held create has arrived.
func (f *fakeRunner) waitHeld(ctx context.Context) error {
	select {
	case <-f.held:
		return nil
	case <-time.After(testutil.PollTimeout):
		return errors.New("the held create never arrived")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release answers the held create.
func (f *fakeRunner) release() { f.once.Do(func() { close(f.gate) }) }
