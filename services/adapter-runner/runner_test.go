package adapterrunner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/testagent"
)

// testAgent is the skein-testagent binary, built once for the package.
var testAgent string

func TestMain(m *testing.M) {
	testutil.Main(m, func(dir string) (err error) {
		testAgent, err = testagent.Build(dir)
		return err
	})
}

// harness is a runner on an embedded NATS, and a subscription to everything
// it publishes to ACP_IO.
type harness struct {
	nc      *nats.Conn
	runner  *adapterrunner.Runner
	reg     *prometheus.Registry // the runner's metrics
	dataDir string
	io      chan *nats.Msg
	// logs holds everything the runner logged, at every level.
	logs *testutil.Buffer
	// stop stops the runner and returns what Run returned; the test's
	// cleanup calls it too.
	stop func() error
}

func start(t *testing.T, agents ...adapterrunner.Agent) *harness {
	t.Helper()
	return startWith(t, adapterrunner.Config{}, agents...)
}

// startWith is start with cfg, whose ID, Builtin and StopGrace it sets,
// and its DataDir where cfg has none.
func startWith(t *testing.T, cfg adapterrunner.Config, agents ...adapterrunner.Agent) *harness {
	t.Helper()
	return startOn(t, natstest.Connect(t, natstest.Run(t)), cfg, agents...)
}

// startOn is startWith on the NATS connection nc.
func startOn(t *testing.T, nc *nats.Conn, cfg adapterrunner.Config, agents ...adapterrunner.Agent) *harness {
	t.Helper()
	h := &harness{nc: nc, dataDir: cfg.DataDir, io: make(chan *nats.Msg, 1024), logs: &testutil.Buffer{}, reg: prometheus.NewRegistry()}
	if h.dataDir == "" {
		h.dataDir = testutil.TempDir(t)
	}
	if len(agents) == 0 {
		agents = []adapterrunner.Agent{{ID: "test", Command: testAgent}}
	}
	cfg.ID, cfg.DataDir, cfg.Builtin, cfg.StopGrace = "r1", h.dataDir, agents, 200*time.Millisecond
	lg := slog.New(slog.NewMultiHandler(
		slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}),
		slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	r, err := adapterrunner.New(cfg, lg, nc, h.reg)
	if err != nil {
		t.Fatal(err)
	}
	h.runner = r
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	h.stop = sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			return fmt.Errorf("Run did not return within 20s of its context's end")
		}
	})
	t.Cleanup(func() {
		if err := h.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("runner stopped: %v", err)
	}
	// The stream's RePublish of ACP_IO is the cheapest way to watch it.
	sub, err := nc.ChanSubscribe(events.IOTailAll, h.io)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return h
}

func header(sid, processID string) nats.Header {
	return nats.Header{
		events.HeaderNamespace: []string{"default"},
		events.HeaderSessionID: []string{sid},
		events.HeaderProcessID: []string{processID},
	}
}

func (h *harness) create(t *testing.T, sid, processID, agent string) *events.AcpSessionCreatedResponse {
	t.Helper()
	resp, err := rpc.Call[events.AcpSessionCreatedResponse](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerCreate),
		&events.AcpCreateSessionRequest{AgentType: agent, ProtocolVersion: 1, McpServers: events.JSON("[]")}, header(sid, processID))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return resp
}

// prompt sends text as turn turnID's prompt and waits for the runner's
// acknowledgement.
func (h *harness) prompt(t *testing.T, sid, processID, turnID, text string) {
	t.Helper()
	content, _ := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	ack, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerPrompt),
		&events.RunnerPromptRequest{TurnID: turnID, Prompt: content}, header(sid, processID))
	if err != nil {
		t.Fatalf("prompt: %v", err)
	}
	if ack.ProcessID != processID {
		t.Errorf("prompt acknowledged by process %q, want %q", ack.ProcessID, processID)
	}
}

// next returns the next ACP_IO record, decoded. Every record names its
// variant and its process in headers.
func (h *harness) next(t *testing.T) (events.Variant, nats.Header) {
	t.Helper()
	select {
	case m := <-h.io:
		v, err := events.Unmarshal(m.Data)
		if err != nil {
			t.Fatalf("undecodable IO record: %v", err)
		}
		if got := m.Header.Get(events.HeaderRecord); got != v.VariantName() {
			t.Errorf("%s record has %s %q", v.VariantName(), events.HeaderRecord, got)
		}
		if m.Header.Get(events.HeaderProcessID) == "" {
			t.Errorf("%s record without %s", v.VariantName(), events.HeaderProcessID)
		}
		return v, m.Header
	case <-time.After(20 * time.Second):
		t.Fatal("no IO record in 20s")
		return nil, nil
	}
}

// until returns the first record of type T, and the records before it.
func until[T events.Variant](t *testing.T, h *harness) (T, []events.Variant) {
	t.Helper()
	var before []events.Variant
	for {
		v, _ := h.next(t)
		if x, ok := v.(T); ok {
			return x, before
		}
		before = append(before, v)
	}
}

func TestCreatePromptAndResponseOrder(t *testing.T) {
	h := start(t)
	created := h.create(t, "s1", "p1", "test")
	if created.SessionID == "" || created.Pid == nil || len(created.AgentInfo) == 0 {
		t.Fatalf("create = %+v, want an ACP session, a pid and agent info", created)
	}
	h.prompt(t, "s1", "p1", "turn-1", "say one\nsay two\nstop max_tokens")
	res, before := until[*events.AdapterPromptResult](t, h)
	if got := strings.Join(updateTexts(before), "|"); got != "one|two" {
		t.Errorf("updates before the result = %q, want one|two", got)
	}
	if res.TurnID != "turn-1" || res.StopReason != "max_tokens" || res.Error != nil || string(res.Result) != `{"stopReason":"max_tokens"}` {
		t.Errorf("result = %+v (result %s), want turn-1, stopReason max_tokens and its raw result", res, res.Result)
	}
}

func TestAdapterEnvironmentIsIsolated(t *testing.T) {
	script := fmt.Sprintf(`echo "home=$HOME tmp=$TMPDIR" >&2; exec %q`, testAgent)
	h := start(t, adapterrunner.Agent{ID: "sh", Command: "/bin/sh", Args: []string{"-c", script}})
	h.create(t, "iso", "p1", "sh")
	stderr, _ := until[*events.AcpAgentStderrEvent](t, h)
	want := fmt.Sprintf("home=%s tmp=%s", filepath.Join(h.dataDir, "default", "iso", "home"), filepath.Join(h.dataDir, "default", "iso", "tmp"))
	if !strings.Contains(string(stderr.Chunk), want) {
		t.Errorf("adapter stderr = %q, want %q", stderr.Chunk, want)
	}
}

func TestCrashIsReportedAfterOutput(t *testing.T) {
	h := start(t)
	h.create(t, "s1", "p1", "test")
	h.prompt(t, "s1", "p1", "t1", "say bye\ncrash 3")
	exited, before := until[*events.AcpAgentExitedEvent](t, h)
	if exited.ExitCode == nil || *exited.ExitCode != 3 || exited.Restart != events.RestartNotAttempted || exited.ProcessID != "p1" {
		t.Errorf("exit = %+v, want code 3, restart not_attempted, process p1", exited)
	}
	if got := strings.Join(updateTexts(before), "|"); got != "bye" {
		t.Errorf("updates before the exit = %q, want the output before the crash", got)
	}
	for _, v := range before {
		if _, ok := v.(*events.AdapterPromptResult); ok {
			t.Errorf("a crashed prompt got a result: %+v", v)
		}
	}
	// The process is gone: requests for it now fail typed.
	_, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerCancel),
		&events.RunnerCancelRequest{TurnID: "t1"}, header("s1", "p1"))
	if e := events.AsError(err); e == nil || e.Code != events.CodeAdapterExited {
		t.Errorf("cancel after exit = %v, want %s", err, events.CodeAdapterExited)
	}
}

func TestGarbageOnStdoutIsSkipped(t *testing.T) {
	h := start(t)
	h.create(t, "s1", "p1", "test")
	h.prompt(t, "s1", "p1", "t1", "garbage\nsay still here")
	res, before := until[*events.AdapterPromptResult](t, h)
	if res.StopReason != "end_turn" {
		t.Errorf("result = %+v, want end_turn", res)
	}
	if got := strings.Join(updateTexts(before), "|"); got != "still here" {
		t.Errorf("updates = %q, want the one after the garbage line", got)
	}
}

func TestStopIsNotAnExit(t *testing.T) {
	h := start(t)
	h.create(t, "s1", "p1", "test")
	if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerStop),
		&events.AcpCloseSessionRequest{}, header("s1", "p1")); err != nil {
		t.Fatal(err)
	}
	// A stopped adapter reports no exit; the next record on ACP_IO is the
	// next session's.
	h.create(t, "s2", "p2", "test")
	h.prompt(t, "s2", "p2", "t1", "say x")
	for {
		v, hdr := h.next(t)
		if _, ok := v.(*events.AcpAgentExitedEvent); ok && hdr.Get(events.HeaderProcessID) == "p1" {
			t.Fatal("a stopped adapter was reported as exited")
		}
		if _, ok := v.(*events.AdapterPromptResult); ok {
			return
		}
	}
}

func TestCreateErrors(t *testing.T) {
	h := start(t, adapterrunner.Agent{ID: "test", Command: testAgent}, adapterrunner.Agent{ID: "missing", Command: "/nonexistent/agent"})
	for _, tc := range []struct {
		agent string
		want  events.Code
	}{
		{"nope", events.CodeUnknownAgent},
		{"missing", events.CodeAgentNotInstalled},
	} {
		_, err := rpc.Call[events.AcpSessionCreatedResponse](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerCreate),
			&events.AcpCreateSessionRequest{AgentType: tc.agent, McpServers: events.JSON("[]")}, header("s1", "p1"))
		if e := events.AsError(err); e == nil || e.Code != tc.want {
			t.Errorf("create %s = %v, want %s", tc.agent, err, tc.want)
		}
	}
	info := h.runner.Info()
	for _, a := range info.Agents {
		if a.ID == "missing" && a.Installed {
			t.Errorf("an agent whose command does not resolve is listed as installed")
		}
	}
}

func TestRegistryFile(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		body    string
		wantErr bool
	}{
		"valid":         {`{"agents":[{"id":"claude","command":"claude-agent-acp","env":{"K":"V"}}]}`, false},
		"auth method":   {`{"agents":[{"id":"codex","command":"codex-acp","authMethod":"openai-api-key"}]}`, false},
		"unknown field": {`{"agents":[{"id":"x","command":"y","cmd":"z"}]}`, true},
		"bad id":        {`{"agents":[{"id":"a.b","command":"y"}]}`, true},
		"no command":    {`{"agents":[{"id":"a"}]}`, true},
		"duplicate":     {`{"agents":[{"id":"a","command":"y"},{"id":"a","command":"z"}]}`, true},
		"not json":      {`agents: []`, true},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".json")
		if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := adapterrunner.LoadRegistry(p)
		if (err != nil) != tc.wantErr {
			t.Errorf("LoadRegistry(%s) = %v, want error %v", name, err, tc.wantErr)
		}
	}
}

// An agent entry with authMethod is authenticated before its session
// opens; without it, an agent that requires a login refuses the session.
func TestAuthMethod(t *testing.T) {
	needsLogin := func(id, method string) adapterrunner.Agent {
		return adapterrunner.Agent{ID: id, Command: testAgent, Args: []string{"--auth-method=api-key"}, AuthMethod: method}
	}
	h := start(t, needsLogin("with", "api-key"), needsLogin("without", ""), needsLogin("wrong", "oauth"))
	create := func(agent string) error {
		_, err := rpc.Call[events.AcpSessionCreatedResponse](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerCreate),
			&events.AcpCreateSessionRequest{AgentType: agent, McpServers: events.JSON("[]")}, header("s-"+agent, "p-"+agent))
		return err
	}
	if err := create("with"); err != nil {
		t.Errorf("create with the agent's auth method = %v", err)
	}
	for _, agent := range []string{"without", "wrong"} {
		if e := events.AsError(create(agent)); e == nil || e.Code != events.CodeAdapterError {
			t.Errorf("create %s = %v, want %s", agent, e, events.CodeAdapterError)
		}
	}
}

// updateTexts returns the text of each session update among records.
func updateTexts(records []events.Variant) []string {
	var texts []string
	for _, v := range records {
		for _, u := range events.UpdatesOf(v) {
			var update struct {
				Content struct{ Text string } `json:"content"`
			}
			_ = json.Unmarshal(u, &update)
			texts = append(texts, update.Content.Text)
		}
	}
	return texts
}

// What the adapter writes at once (a burst, one write to its pipe, which
// the runner reads at once) is one AdapterUpdates record, its updates in
// order; an update alone is an AdapterUpdate of its own. Record numbers
// follow one another.
func TestBurstIsOneRecord(t *testing.T) {
	h := start(t)
	h.create(t, "s1", "p1", "test")
	var got []string
	var last uint64
	for i, script := range []string{"say alone", "burst\nchunks 3 x\nplan a | b"} {
		h.prompt(t, "s1", "p1", fmt.Sprint("turn-", i), script)
		for {
			v, hdr := h.next(t)
			no, err := strconv.ParseUint(hdr.Get(events.HeaderRecordNo), 10, 64)
			if err != nil || (last != 0 && no != last+1) {
				t.Errorf("%s record number %q after %d", v.VariantName(), hdr.Get(events.HeaderRecordNo), last)
			}
			last = no
			if _, ok := v.(*events.AdapterPromptResult); ok {
				break
			}
			got = append(got, fmt.Sprintf("%s%q", v.VariantName(), updateTexts([]events.Variant{v})))
			checkRoutes(t, v)
		}
	}
	want := []string{
		`AdapterUpdate["alone"]`,
		`AdapterUpdates["x 1 " "x 2 " "x 3 " ""]`, // the plan has no text
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ACP_IO records (-want +got):\n%s", diff)
	}
}

// checkRoutes checks that each update of an ACP_IO record carries its
// kind and messageId as the update itself has them, so that the session
// service may route it without scanning it.
func checkRoutes(t *testing.T, v events.Variant) {
	t.Helper()
	check := func(raw events.JSON, kind string, id *string) {
		t.Helper()
		want, err := acp.ParseUpdate(json.RawMessage(raw))
		if err != nil {
			t.Fatalf("update %s: %v", raw, err)
		}
		if kind != want.Kind || (id == nil) != (want.MessageID == nil) || id != nil && *id != *want.MessageID {
			t.Errorf("update %s carries kind %q, messageId %v; it has %q, %v", raw, kind, id, want.Kind, want.MessageID)
		}
	}
	switch v := v.(type) {
	case *events.AdapterUpdate:
		check(v.Update, v.Kind, v.MessageID)
	case *events.AdapterUpdates:
		for i, u := range v.Updates {
			kind, id, ok := v.Route(i)
			if !ok {
				t.Fatalf("update %d of %d carries no route: kinds %q, %d messageIds", i, len(v.Updates), v.Kinds, len(v.MessageIDs))
			}
			check(u, kind, id)
		}
	}
}
