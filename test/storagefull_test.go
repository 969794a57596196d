package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/eventlog/eventlogtest"
)

// The store's limits in TestStorageFull: the account's, which the test
// raises as an operator would, below the server's, which is fixed at its
// start.
const (
	fullAccountStore = 24 << 20
	fullServerStore  = 256 << 20
	fullRaisedStore  = 200 << 20
)

// smallStore returns a directory for JetStream's store: a 64 MiB tmpfs
// when the test may mount one (as root), so that the store is small on
// disk as well as by its limit; else a plain temporary directory, the
// account's limit alone bounding the store.
func smallStore(t *testing.T) string {
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		t.Logf("not root: the store is bounded by JetStream's limit alone, on %s", dir)
		return dir
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64m,mode=0700"); err != nil {
		t.Logf("mount a tmpfs: %v; the store is bounded by JetStream's limit alone, on %s", err, dir)
		return dir
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount the tmpfs: %v", err)
		}
	})
	return dir
}

// limitAccount sets the JetStream store limit of the account the stack's
// services use (natstest's global account), as accounts.conf would.
func limitAccount(t *testing.T, ns *server.Server, bytes int64) {
	t.Helper()
	limit := server.JetStreamAccountLimits{MaxMemory: -1, MaxStore: bytes, MaxStreams: -1, MaxConsumers: -1}
	if err := ns.GlobalAccount().UpdateJetStreamLimits(map[string]server.JetStreamAccountLimits{"": limit}); err != nil {
		t.Fatalf("limit the account's store: %v", err)
	}
}

// fillStore fills JetStream's store to the last byte with messages of a
// stream of its own, each size down to 8 bytes until the store refuses
// one for want of room. The first message it stores is spare bytes: its
// sequence is returned, for makeRoom.
func fillStore(t *testing.T, js jetstream.JetStream, spare int) uint64 {
	t.Helper()
	ctx := t.Context()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("create the filler stream: %v", err)
	}
	var spareSeq uint64
	if spare > 0 {
		ack, err := js.Publish(ctx, "filler.spare", make([]byte, spare))
		if err != nil {
			t.Fatalf("store the spare bytes: %v", err)
		}
		spareSeq = ack.Sequence
	}
	for size := 1 << 20; size >= 8; size /= 8 {
		for {
			_, err := js.Publish(ctx, "filler.x", make([]byte, size))
			if err == nil {
				continue
			}
			if !eventlog.StorageFull(err) {
				t.Fatalf("fill the store: %v", err)
			}
			break
		}
	}
	return spareSeq
}

// makeRoom deletes the filler message seq.
func makeRoom(t *testing.T, js jetstream.JetStream, seq uint64) {
	t.Helper()
	s, err := js.Stream(t.Context(), "FILLER")
	if err == nil {
		err = s.DeleteMsg(t.Context(), seq)
	}
	if err != nil {
		t.Fatalf("delete filler message %d: %v", seq, err)
	}
}

// TestStorageFull runs two sessions against a full JetStream store. With
// room for small records only, session a's turn makes a 3 MB message: its
// runner holds it, which the store refuses, and the store is then filled
// to the last byte. The owner ends the silent turn, storage_full, holding
// its end, which the store refuses too; the prompt answers 507 all the
// same rather than hang. Prompts, opens and answers answer storage_full,
// never a contended lease, and /readyz says storage_full; session b's turn,
// waiting for a person meanwhile, is left to wait. Once the limit is
// raised, a's held end is stored (a is failed, storage_full), /readyz is
// ready again, b's request is answered and its turn completes, and a
// answers its next prompt. The logs pass the audit, and every turn that
// answered 200 has its message in them.
func TestStorageFull(t *testing.T) {
	ns := natstest.Run(t, natstest.WithStoreDir(smallStore(t)), natstest.WithMaxPayload(8<<20),
		func(o *server.Options) { o.JetStreamMaxStore = fullServerStore })
	limitAccount(t, ns, fullAccountStore)
	st := startStack(t, ns, testutil.TempDir(t))
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	session := func(sid string) string { return st.url + "/v1/sessions/" + sid }
	// Every operation on a session is recorded, and the history checked
	// for linearizability at the end (linearize_test.go).
	hist := newOpHistory()
	open := func(sid, body string) (int, []byte) {
		call := hist.now()
		code, b := do(t, http.MethodPut, session(sid), body)
		switch a := (answer{code: code, body: b}); {
		case code == http.StatusOK:
			hist.add(0, call, sessionOp{Session: sid, Kind: "open"}, sessionResult{Status: "ok"})
		case a.errorCode() == string(events.CodeStorageFull):
			hist.add(0, call, sessionOp{Session: sid, Kind: "open"}, sessionResult{Status: "refused"})
		default:
			hist.lost(sid, fmt.Sprintf("open: %d %s", code, b))
		}
		return code, b
	}
	for _, sid := range []string{"a", "b"} {
		if code, body := open(sid, `{"agent":"test","permissionPolicy":"ask"}`); code != http.StatusOK {
			t.Fatalf("PUT session %s = %d %s", sid, code, body)
		}
	}
	prompt := func(sid, text string) (int, []byte) {
		b, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": text}}})
		call := hist.now()
		code, body, h := doHeader(t, http.MethodPost, session(sid)+"/prompt", "", string(b))
		hist.prompt(1, call, sid, "", answer{code: code, body: body, turn: h.Get("X-Skein-Turn-Id")})
		return code, body
	}
	respond := func(sid, req, body string) (int, []byte) {
		call := hist.now()
		code, b := do(t, http.MethodPost, session(sid)+"/permissions/"+req, body)
		var res struct{ Status string }
		op := sessionOp{Session: sid, Kind: "respond", Request: req}
		switch a := (answer{code: code, body: b}); {
		case code == http.StatusOK && json.Unmarshal(b, &res) == nil && res.Status != "":
			hist.add(2, call, op, sessionResult{Status: res.Status})
		case a.errorCode() == string(events.CodeStorageFull):
			hist.add(2, call, op, sessionResult{Status: "refused"})
		default:
			hist.lost(sid, fmt.Sprintf("answer: %d %s", code, b))
		}
		return code, b
	}
	promptAsync := func(sid, text string) <-chan answer {
		c := make(chan answer, 1)
		go func() {
			code, body := prompt(sid, text)
			c <- answer{code: code, body: body}
		}()
		return c
	}
	// state polls the session's state until done says it is the one.
	type stateJSON struct {
		Status   string
		Error    *struct{ Code string }
		Requests []struct{ RequestID string }
	}
	state := func(sid, what string, done func(stateJSON) bool) stateJSON {
		t.Helper()
		var st stateJSON
		if err := pollFor(t.Context(), what, func() bool {
			call := hist.now()
			code, body := do(t, http.MethodGet, session(sid), "")
			var s struct{ State json.RawMessage }
			if code != http.StatusOK || json.Unmarshal(body, &s) != nil || json.Unmarshal(s.State, &st) != nil {
				return false
			}
			var turn struct{ TurnID string }
			_ = json.Unmarshal(s.State, &turn)
			res := sessionResult{Status: "idle"}
			if turn.TurnID != "" || st.Status == "running" {
				res = sessionResult{Status: "busy", Turn: turn.TurnID}
			}
			hist.add(3, call, sessionOp{Session: sid, Kind: "get"}, res)
			return done(st)
		}); err != nil {
			t.Fatal(err)
		}
		return st
	}
	wantStorageFull := func(what string, code int, body []byte) {
		t.Helper()
		var e struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(body, &e)
		if code != http.StatusInsufficientStorage || e.Error.Code != string(events.CodeStorageFull) ||
			!strings.Contains(e.Error.Message, "store") || strings.Contains(e.Error.Message, "contended") {
			t.Errorf("%s = %d %s, want 507 storage_full naming the store", what, code, body)
		}
	}

	for i := range 2 {
		if code, body := prompt("a", fmt.Sprintf("big 1000000\nsay turn %d", i)); code != http.StatusOK {
			t.Fatalf("prompt a %d = %d %s", i, code, body)
		}
	}
	bDone := promptAsync("b", "permission call_1 allow_once=yes,reject_once=no\nsay after the answer")
	requestID := state("b", "b's permission request", func(s stateJSON) bool { return len(s.Requests) > 0 }).Requests[0].RequestID

	// Room for small records only: a's turn is accepted, and its 3 MB
	// message is not stored. Then no room at all.
	makeRoom(t, js, fillStore(t, js, 512<<10))
	aDone := promptAsync("a", "big 3000000\nsay too much")
	state("a", "a's turn to be accepted", func(s stateJSON) bool { return s.Status == "running" })
	fillStore(t, js, 0)
	a := <-aDone
	wantStorageFull("the prompt whose output and end the store refused", a.code, a.body)

	code, body := prompt("a", "say more")
	wantStorageFull("a prompt on the full store", code, body)
	code, body = open("c", `{"agent":"test"}`)
	wantStorageFull("an open on the full store", code, body)
	code, body = respond("b", requestID, `{"optionId":"yes"}`)
	wantStorageFull("an answer on the full store", code, body)
	code, body = do(t, http.MethodGet, st.url+"/readyz", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"status":"storage_full"`) {
		t.Errorf("/readyz on the full store = %d %s, want 503 storage_full", code, body)
	}

	// The operator raises the limit: a's held end is stored, and both
	// sessions go on.
	limitAccount(t, ns, fullRaisedStore)
	if s := state("a", "a's held end to be stored", func(s stateJSON) bool { return s.Status != "running" }); s.Status != "failed" || s.Error == nil || s.Error.Code != string(events.CodeStorageFull) {
		t.Errorf("session a after its turn ended storage_full = %+v, want failed, storage_full", s)
	}
	code, body = respond("b", requestID, `{"optionId":"yes"}`)
	if code != http.StatusOK || !strings.Contains(string(body), `"accepted"`) {
		t.Errorf("b's answer once the limit is raised = %d %s", code, body)
	}
	if b := <-bDone; b.code != http.StatusOK || !strings.Contains(string(b.body), "after the answer") {
		t.Errorf("b's prompt = %d %s, want its turn completed", b.code, b.body)
	}
	if code, body := prompt("a", "say back"); code != http.StatusOK || !strings.Contains(string(body), "back") {
		t.Errorf("a prompt of a once the limit is raised = %d %s", code, body)
	}
	if err := pollFor(t.Context(), "/readyz to be ready", func() bool {
		code, _ := do(t, http.MethodGet, st.url+"/readyz", "")
		return code == http.StatusOK
	}); err != nil {
		t.Error(err)
	}

	for sid, want := range map[events.SessionID][]string{
		"a": {events.OutcomeCompleted, events.OutcomeCompleted, events.OutcomeFailed, events.OutcomeCompleted},
		"b": {events.OutcomeCompleted},
	} {
		log := eventlogtest.Audit(t, js, events.DefaultNamespace, sid)
		stored := map[uint64]bool{}
		for _, r := range log.Records {
			stored[r.Sequence] = true
		}
		var outcomes []string
		for _, turn := range log.Turns {
			f := turn.Finish
			outcomes = append(outcomes, f.Outcome)
			if f.Outcome == events.OutcomeFailed && (f.Error == nil || f.Error.Code != string(events.CodeStorageFull)) {
				t.Errorf("session %s: turn %s failed with %+v, want storage_full", sid, turn.ID, f.Error)
			}
			if f.Outcome == events.OutcomeCompleted && (f.MessageSeq == 0 || !stored[f.MessageSeq]) {
				t.Errorf("session %s: turn %s completed, its message at %d not in the log", sid, turn.ID, f.MessageSeq)
			}
		}
		if !slices.Equal(outcomes, want) {
			t.Errorf("session %s: turns ended %v, want %v", sid, outcomes, want)
		}
	}
	hist.check(t, "storage-full")
}
