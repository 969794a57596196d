package session_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/client/turnwait"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

var testAgent string

func TestMain(m *testing.M) {
	testutil.Main(m, func(dir string) (err error) {
		testAgent, err = testagent.Build(dir)
		return err
	})
}

type harness struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	control string // the test agent's pause/release directory
}

// run starts svc and stops it when the test ends.
func run(t *testing.T, name string, svc interface {
	Run(context.Context) error
	Ready() <-chan struct{}
}) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	select {
	case <-svc.Ready():
	case err := <-done:
		t.Fatalf("%s stopped: %v", name, err)
	}
}

// start runs a runner with the agent "test" and a session service on an
// embedded NATS server configured with opts.
func start(t *testing.T, opts ...natstest.Option) *harness {
	t.Helper()
	ns := natstest.Run(t, opts...)
	nc := natstest.Connect(t, ns)
	js, _ := jetstream.New(nc)
	h := &harness{nc: nc, js: js, control: t.TempDir()}
	lg := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	runner, err := adapterrunner.New(adapterrunner.Config{
		ID: "r1", DataDir: t.TempDir(), StopGrace: 200 * time.Millisecond,
		Builtin: []adapterrunner.Agent{{ID: "test", Command: testAgent, Env: map[string]string{testagent.EnvControlDir: h.control}}},
	}, lg, nc, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := session.New(session.Config{}, lg, nc, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	run(t, "runner", runner)
	run(t, "session", svc)
	return h
}

func (h *harness) open(t testing.TB, sid string, req events.AcpOpenSessionRequest) error {
	t.Helper()
	req.SessionID = &sid
	if req.Agent == "" {
		req.Agent = "test"
	}
	_, err := rpc.Call[events.AcpOpenSessionResponse](t.Context(), h.nc, events.APISubject("default", events.OpOpenSession), &req, nil)
	return err
}

func (h *harness) prompt(ctx context.Context, sid, key, script string) (*events.AcpPromptResponse, error) {
	content, _ := json.Marshal([]map[string]string{{"type": "text", "text": script}})
	req := &events.AcpPromptRequest{SessionID: &sid, Content: content}
	if key != "" {
		req.IdempotencyKey = &key
	}
	return turnwait.Prompt(ctx, h.js, "default", req)
}

func code(err error) events.Code {
	if err == nil {
		return ""
	}
	return events.AsError(err).Code
}

// controlRecords returns the variant names of a session's control records.
func (h *harness) controlRecords(t *testing.T, sid events.SessionID) []string {
	t.Helper()
	recs, err := lifecycle(t.Context(), h.js, sid)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.Header.Get(events.HeaderRecord))
	}
	return out
}

func TestPromptNeverCreatesASession(t *testing.T) {
	h := start(t)
	if _, err := h.prompt(t.Context(), "ghost", "", "hi"); code(err) != events.CodeSessionNotFound {
		t.Errorf("prompt on a missing session = %v, want %s", err, events.CodeSessionNotFound)
	}
	if recs := h.controlRecords(t, "ghost"); len(recs) != 0 {
		t.Errorf("a failed prompt wrote %v", recs)
	}
}

func TestOpenIsIdempotent(t *testing.T) {
	h := start(t)
	for range 2 {
		if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.controlRecords(t, "s1"); strings.Join(got, ",") != "SessionOpened,AdapterAttached" {
		t.Errorf("control records = %v, want one SessionOpened and one AdapterAttached", got)
	}
	other := "/elsewhere"
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{Cwd: &other}); code(err) != events.CodeSessionConflict {
		t.Errorf("reopen with another cwd = %v, want %s", err, events.CodeSessionConflict)
	}
	for name, req := range map[string]events.AcpOpenSessionRequest{
		"no agent":       {Agent: "-"},
		"relative cwd":   {Cwd: new("rel")},
		"bad policy":     {PermissionPolicy: new("sometimes")},
		"env not object": {Env: events.JSON(`["A=1"]`)},
		"dirs not array": {AdditionalDirectories: events.JSON(`"/tmp"`)},
		"mcp not JSON":   {McpServers: events.JSON(`[`)},
		"unknown agent":  {Agent: "nope"},
		"bad session ID": {},
	} {
		sid := "s2"
		if name == "bad session ID" {
			sid = "a b"
		}
		if name == "no agent" {
			req.Agent = ""
			err := func() error {
				req.SessionID = &sid
				_, err := rpc.Call[events.AcpOpenSessionResponse](t.Context(), h.nc, events.APISubject("default", events.OpOpenSession), &req, nil)
				return err
			}()
			if code(err) != events.CodeInvalidRequest {
				t.Errorf("%s: open = %v, want %s", name, err, events.CodeInvalidRequest)
			}
			continue
		}
		err := h.open(t, sid, req)
		if err == nil {
			t.Errorf("%s: open succeeded", name)
		}
	}
}

//go:fix inline
func ptr[T any](v T) *T { return new(v) }

func TestTurnOutcomes(t *testing.T) {
	h := start(t)
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		script     string
		stopReason string
		code       events.Code
	}{
		{"say hello", "end_turn", ""},
		{"say partial\nstop max_tokens", "max_tokens", ""},
		{"error -32603 boom", "", events.CodeAdapterError},
		{"permission call_1 allow_once=yes,reject_once=no", "end_turn", ""},
	} {
		res, err := h.prompt(t.Context(), "s1", "", tc.script)
		if code(err) != tc.code {
			t.Errorf("prompt %q = %v, want %q", tc.script, err, tc.code)
			continue
		}
		if err == nil && res.StopReason != tc.stopReason {
			t.Errorf("prompt %q stopReason = %q, want %q", tc.script, res.StopReason, tc.stopReason)
		}
		if strings.HasPrefix(tc.script, "permission") && !strings.Contains(string(res.Message), "selected yes") {
			t.Errorf("allow_all answered %s, want the allow_once option", res.Message)
		}
	}
	var finished int
	for _, r := range h.controlRecords(t, "s1") {
		if r == "TurnFinished" {
			finished++
		}
	}
	if finished != 4 {
		t.Errorf("%d TurnFinished records, want 4", finished)
	}
}

func TestRejectAllWithoutRejectOption(t *testing.T) {
	h := start(t)
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{PermissionPolicy: ptr(events.PolicyRejectAll)}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(t.Context(), "s1", "", "permission call_1 allow_once=yes"); code(err) != events.CodePermissionPolicyUnsatisfied {
		t.Errorf("prompt = %v, want %s", err, events.CodePermissionPolicyUnsatisfied)
	}
	res, err := h.prompt(t.Context(), "s1", "", "permission call_1 allow_once=yes,reject_once=no")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res.Message), "selected no") {
		t.Errorf("reject_all answered %s, want the reject_once option", res.Message)
	}
}

// A second prompt while one runs is session_busy at once; the same
// idempotency key and content joins the running turn; a different content
// under that key is idempotency_conflict.
func TestBusyAndIdempotentJoin(t *testing.T) {
	h := start(t)
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	script := "pause p1\nsay released"
	var wg sync.WaitGroup
	results := make([]*events.AcpPromptResponse, 2)
	errs := make([]error, 2)
	wg.Go(func() { results[0], errs[0] = h.prompt(t.Context(), "s1", "k1", script) })
	if err := testagent.WaitPaused(t.Context(), h.control, "p1"); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { results[1], errs[1] = h.prompt(t.Context(), "s1", "k1", script) })
	if _, err := h.prompt(t.Context(), "s1", "", "say other"); code(err) != events.CodeSessionBusy {
		t.Errorf("concurrent prompt = %v, want %s", err, events.CodeSessionBusy)
	}
	if _, err := h.prompt(t.Context(), "s1", "k1", "say other"); code(err) != events.CodeIdempotencyConflict {
		t.Errorf("same key, other content = %v, want %s", err, events.CodeIdempotencyConflict)
	}
	if err := testagent.Release(t.Context(), h.control, "p1"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil || !strings.Contains(string(results[i].Message), "released") {
			t.Errorf("prompt %d = %v, %v, want the released turn", i, results[i], errs[i])
		}
	}
}

// An adapter that dies mid-turn fails the turn with adapter_exited; the
// next prompt attaches a new adapter.
func TestAdapterExitMidTurn(t *testing.T) {
	h := start(t)
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(t.Context(), "s1", "", "say before\ncrash 7"); code(err) != events.CodeAdapterExited {
		t.Fatalf("crashing prompt = %v, want %s", err, events.CodeAdapterExited)
	}
	res, err := h.prompt(t.Context(), "s1", "", "say again")
	if err != nil || !strings.Contains(string(res.Message), "again") {
		t.Fatalf("prompt after the crash = %v, %v", res, err)
	}
	got := strings.Join(h.controlRecords(t, "s1"), ",")
	want := "SessionOpened,AdapterAttached,AcpAgentExitedEvent,TurnFinished,AdapterAttached,TurnFinished"
	if got != want {
		t.Errorf("control records = %s, want %s", got, want)
	}
	// The chunk of the failed turn never became durable.
	recs, err := eventlog.Forward(t.Context(), h.js, events.StreamLog, events.LogSubject("default", "s1", events.LogEvents), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if strings.Contains(string(r.Data), "before") && !strings.Contains(string(r.Data), "user_message_chunk") {
			t.Errorf("output of the failed turn is durable: %s", r.Data)
		}
	}
}

func TestPromptValidation(t *testing.T) {
	h := start(t)
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	sid := "s1"
	for name, tc := range map[string]struct {
		content string
		key     *string
	}{
		"not an array":    {content: `{"type":"text"}`},
		"empty":           {content: `[]`},
		"block sans type": {content: `[{"text":"x"}]`},
		"not JSON":        {content: `[`},
		"key with space":  {content: `[{"type":"text","text":"x"}]`, key: new("a b")},
	} {
		req := &events.AcpPromptRequest{SessionID: &sid, Content: events.JSON(tc.content), IdempotencyKey: tc.key}
		if _, err := rpc.Call[events.PromptAccepted](t.Context(), h.nc, events.APISubject("default", events.OpPrompt), req, nil); code(err) != events.CodeInvalidRequest {
			t.Errorf("%s: prompt = %v, want %s", name, err, events.CodeInvalidRequest)
		}
	}
}

// An open for an agent no runner knows is refused and records nothing: the
// same ID then opens with a known agent, without a conflict.
func TestOpenUnknownAgentRecordsNothing(t *testing.T) {
	h := startRig(t, session.Config{})
	if err := h.open(t, "u1", events.AcpOpenSessionRequest{Agent: "nobody"}); code(err) != events.CodeUnknownAgent {
		t.Fatalf("open with an unknown agent = %v, want %s", err, events.CodeUnknownAgent)
	}
	last, err := eventlog.Last(t.Context(), h.js, events.StreamLog, events.LogFilter("default", "u1"))
	if err != nil || last != nil {
		t.Fatalf("the refused open left %+v, %v in the log; want nothing", last, err)
	}
	if err := h.open(t, "u1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatalf("open with a known agent after the refusal: %v", err)
	}
}

// ACP_LOG keeps a bounded number of records per subject, and a session's
// control records grow with its turns: the record that opened the session
// is kept apart, so that a session never outlives its own existence. A
// new owner, which reads the session from its log alone, finds it.
func TestSessionOutlivesItsRetention(t *testing.T) {
	h := startRig(t, session.Config{MaxEventsPerSession: 2})
	ctx := t.Context()
	if err := h.open(t, "kept", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := h.prompt(ctx, "kept", "", fmt.Sprintf("say turn %d", i)); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
	}
	if got := h.controlRecords(t, "kept"); !slices.Contains(got, events.RecordSessionOpened) || len(got) > 3 {
		t.Fatalf("lifecycle records kept = %v, want SessionOpened and the last two control records", got)
	}
	h.stopSvc()
	h.startSession()
	res, err := h.prompt(ctx, "kept", "", "say still here")
	if err != nil || !strings.Contains(string(res.Message), "still here") {
		t.Fatalf("prompt after a new owner read the pruned log = %+v, %v; want the turn's reply", res, err)
	}
	if err := h.open(t, "kept", events.AcpOpenSessionRequest{}); err != nil {
		t.Errorf("reopening with the same options: %v", err)
	}
}
