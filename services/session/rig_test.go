package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/internal/stacktest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/eventlog/eventlogtest"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/history"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// rig is a harness whose session service and runner can be stopped and
// started again on the same NATS server, and whose session service runs
// with a Config and a metrics registry the test chooses. It is a
// stacktest.Stack with the session service's agents: the stack starts
// its services, and counts no request (a stopped service's requests find
// no responder at once).
type rig struct {
	*harness
	st *stacktest.Stack
	t  testing.TB
	lg *slog.Logger
	// ns is the rig's NATS server; connect opens another connection to it.
	ns      *server.Server
	connect func() *nats.Conn
	cfg     session.Config
	// reg is the registry of the session service running now.
	reg        *prometheus.Registry
	stopSvc    func()
	stopRunner func()
	stateDir   string // the restore-tier agents' sessions
	runnerNC   *nats.Conn
	// osInstructionsFile is the OS instructions file of the runners
	// started from now on ("": none).
	osInstructionsFile string
}

// startRig starts an embedded NATS server, a runner "r1" with the agents
// "test" and "stubborn", and a session service with cfg. Each service has
// its own connection, as in production.
func startRig(t testing.TB, cfg session.Config) *rig {
	t.Helper()
	st := stacktest.Start(t, stacktest.WithoutServices(), stacktest.Uncounted())
	ns := st.Server()
	r := &rig{
		harness:  &harness{nc: st.Conn(), js: st.JetStream(), control: st.ControlDir()},
		st:       st,
		stateDir: t.TempDir(),
		t:        t,
		ns:       ns,
		connect:  func() *nats.Conn { return natstest.Connect(t, ns) },
		lg:       stacktest.Logger(t),
		cfg:      cfg,
	}
	r.startRunner("r1")
	r.startSession()
	// The real history service: getSession, the read a client makes after
	// a prompt returns, is the one tests check states with.
	st.StartHistory(history.Config{}, r.connect())
	return r
}

// startRunner starts a runner with id; it replaces stopRunner.
func (r *rig) startRunner(id string) {
	r.t.Helper()
	r.startRunnerOn(id, r.connect())
}

// startRunnerOn is startRunner on the connection nc.
func (r *rig) startRunnerOn(id string, nc *nats.Conn) {
	r.t.Helper()
	env := map[string]string{testagent.EnvControlDir: r.control}
	r.stopRunner = r.st.StartRunner(adapterrunner.Config{
		ID: id, DataDir: r.t.TempDir(), OSInstructionsFile: r.osInstructionsFile,
		Builtin: []adapterrunner.Agent{
			{ID: "test", Command: testAgent, Env: env},
			// An adapter that never hears session/cancel: a filter in front
			// of the test agent's stdin drops it. (The test agent itself
			// honours every cancel; it has no stubborn mode.)
			{ID: "stubborn", Command: "/bin/sh", Args: []string{"-c", `grep --line-buffered -v 'session/cancel' | exec "$0"`, testAgent}, Env: env},
			// Restore tiers: an agent that resumes or loads sessions kept in a
			// state directory that outlives its processes, and one that
			// advertises load but forgets everything with its process.
			{ID: "resumer", Command: testAgent, Args: []string{"--resume", "--load-session", "--state-dir", r.stateDir}, Env: env},
			{ID: "loader", Command: testAgent, Args: []string{"--load-session", "--state-dir", r.stateDir}, Env: env},
			{ID: "forgetful", Command: testAgent, Args: []string{"--load-session"}, Env: env},
			// An agent that lost its own copy of the session, as gemini-cli
			// does when the load comes in the session's first minute: its
			// session/load answers -32603, every time.
			{ID: "amnesiac", Command: testAgent, Args: []string{"--load-session", "--state-dir", r.stateDir, "--fail-load", "always"}, Env: env},
			// Configuration: config options, or only the legacy mode and
			// model lists.
			{ID: "configurable", Command: testAgent, Args: []string{"--config-options=mode,model", "--resume", "--state-dir", r.stateDir}, Env: env},
			{ID: "legacy", Command: testAgent, Args: []string{"--legacy-modes", "--legacy-models"}, Env: env},
			// An agent that takes text and resource_link blocks only: it
			// advertises no promptCapabilities.
			{ID: "textonly", Command: testAgent, Args: []string{"--prompt-capabilities=none", "--resume", "--state-dir", r.stateDir}, Env: env},
		},
	}, nc)
	r.runnerNC = nc
}

// partitionRunner cuts the runner off NATS without letting it say goodbye:
// its heartbeat stays until it expires, and nothing it hosts answers.
func (r *rig) partitionRunner() {
	r.runnerNC.Close()
}

// startSession starts a session service with r.cfg and a fresh registry;
// it replaces stopSvc and reg.
func (r *rig) startSession() {
	r.t.Helper()
	r.reg = prometheus.NewRegistry()
	r.stopSvc = r.st.StartSession(r.cfg, r.connect(), r.reg)
}

// flush waits until the server has processed everything nc sent: Ready
// is closed once a service has subscribed, not once the server knows it,
// and the test's requests come on another connection.
func flush(t testing.TB, nc *nats.Conn) {
	t.Helper()
	if err := nc.FlushTimeout(testutil.PollTimeout); err != nil {
		t.Fatal(err)
	}
}

// runStoppable starts svc and returns a function that stops it and waits
// for Run to return (stacktest.RunService). The function is also called
// when the test ends; a second call does nothing.
func runStoppable(t testing.TB, name string, svc stacktest.Service) func() {
	t.Helper()
	return stacktest.RunService(t, name, svc)
}

// dispatches returns acp_session_prompt_dispatches_total of the session
// service running now.
func (r *rig) dispatches() float64 {
	r.t.Helper()
	return testutil.Metric(r.t, r.reg, "acp_session_prompt_dispatches_total")
}

func (h *harness) cancelPrompt(ctx context.Context, sid string) (*events.AcpCancelPromptResponse, error) {
	return rpc.Call[events.AcpCancelPromptResponse](ctx, h.nc, events.APISubject("default", events.OpCancelPrompt),
		&events.AcpCancelPromptRequest{SessionID: &sid}, nil)
}

func (h *harness) respondPermission(ctx context.Context, sid, requestID, optionID string) (*events.AcpRespondPermissionResponse, error) {
	return rpc.Call[events.AcpRespondPermissionResponse](ctx, h.nc, events.APISubject("default", events.OpRespondPermission),
		&events.AcpRespondPermissionRequest{SessionID: sid, RequestID: requestID, OptionID: optionID}, nil)
}

// waitPermissionRequest waits until the newest public event of sid is a
// permission_request stored after sequence after, and returns it.
func (h *harness) waitPermissionRequest(ctx context.Context, sid string, after uint64) (*eventlog.Record, *events.AcpDurablePermissionRequest, error) {
	return waitNewest[events.AcpDurablePermissionRequest](ctx, h, sid, after)
}

// waitNewest waits until the newest public event of sid is a T stored
// after sequence after, and returns it.
func waitNewest[T any, PT interface {
	*T
	events.Variant
}](ctx context.Context, h *harness, sid string, after uint64) (*eventlog.Record, PT, error) {
	name := PT(new(T)).VariantName()
	var rec *eventlog.Record
	err := testutil.Poll(ctx, "a "+name+" in "+sid, func() (bool, error) {
		last, err := eventlog.Last(ctx, h.js, events.StreamLog, events.LogSubject("default", events.SessionID(sid), events.LogEvents))
		if err != nil || last == nil {
			return false, err
		}
		if last.Sequence > after && last.Header.Get(events.HeaderRecord) == name {
			rec = last
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return nil, nil, err
	}
	req, err := events.Decode[T, PT](rec.Data)
	return rec, req, err
}

// lastSeq returns the sequence of the newest record of sid (0: none).
func (h *harness) lastSeq(ctx context.Context, sid string) (uint64, error) {
	last, err := eventlog.Last(ctx, h.js, events.StreamLog, events.LogFilter("default", events.SessionID(sid)))
	if err != nil || last == nil {
		return 0, err
	}
	return last.Sequence, nil
}

// ctl returns sid's control records, decoded, in log order.
// publicMessage returns the message of the turn f finished in its public
// form, as history shows it: what a prompt's answer must carry.
func (h *harness) publicMessage(t testing.TB, sid string, f *events.TurnFinished) string {
	t.Helper()
	if f.MessageSeq == 0 {
		t.Fatalf("turn %s names no message record", f.TurnID)
	}
	rec, err := eventlog.At(t.Context(), h.js, events.StreamLog, f.MessageSeq)
	if err != nil || rec == nil {
		t.Fatalf("the message record %d of turn %s: %v, %v", f.MessageSeq, f.TurnID, rec, err)
	}
	entry, err := eventlog.HistoryEntry(events.SessionID(sid), rec.Sequence, rec.Time, rec.Header, rec.Data)
	if err != nil {
		t.Fatal(err)
	}
	b, err := eventjson.Durable(entry)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lifecycle reads a session's lifecycle records in stream order: those on
// its LogControl subject, and its SessionOpened on OpenedSubject.
func lifecycle(ctx context.Context, js jetstream.JetStream, sid events.SessionID) ([]*eventlog.Record, error) {
	recs, err := eventlog.Forward(ctx, js, events.StreamLog, events.LogFilter("default", sid), 0, 10000)
	if err != nil {
		return nil, err
	}
	ctl, opened := events.LogSubject("default", sid, events.LogControl), events.OpenedSubject("default", sid)
	return slices.DeleteFunc(recs, func(r *eventlog.Record) bool { return r.Subject != ctl && r.Subject != opened }), nil
}

func (h *harness) ctl(ctx context.Context, sid string) ([]events.Variant, error) {
	recs, err := lifecycle(ctx, h.js, events.SessionID(sid))
	if err != nil {
		return nil, err
	}
	out := make([]events.Variant, 0, len(recs))
	for _, r := range recs {
		v, err := events.Unmarshal(r.Data)
		if err != nil {
			return nil, fmt.Errorf("control record %d: %w", r.Sequence, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// lastAttached returns sid's newest AdapterAttached record.
func (h *harness) lastAttached(ctx context.Context, sid string) (*events.AdapterAttached, error) {
	recs, err := h.ctl(ctx, sid)
	if err != nil {
		return nil, err
	}
	for i := len(recs) - 1; i >= 0; i-- {
		if a, ok := recs[i].(*events.AdapterAttached); ok {
			return a, nil
		}
	}
	return nil, errors.New("no AdapterAttached record")
}

// countCtl counts sid's control records of the variant name.
func (h *harness) countCtl(ctx context.Context, sid, name string) (int, error) {
	recs, err := h.ctl(ctx, sid)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range recs {
		if r.VariantName() == name {
			n++
		}
	}
	return n, nil
}

// update is the part of an ACP session update the tests look at.
type update struct {
	SessionUpdate string  `json:"sessionUpdate"`
	MessageID     *string `json:"messageId"`
	Content       struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

// decoded is one public event of a log, decoded.
type decoded struct {
	rec    *eventlog.Record
	turnID string
	upd    *update // set for AcpDurableSessionUpdate
	req    *events.AcpDurablePermissionRequest
	resp   *events.AcpDurablePermissionResponse
}

func decodeEvents(recs []*eventlog.Record) ([]decoded, error) {
	out := make([]decoded, 0, len(recs))
	for _, r := range recs {
		v, err := events.Unmarshal(r.Data)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", r.Sequence, err)
		}
		d := decoded{rec: r, turnID: r.Header.Get(events.HeaderTurnID)}
		switch v := v.(type) {
		case *events.AcpDurableSessionUpdate:
			d.upd = new(update)
			if err := json.Unmarshal(v.Update, d.upd); err != nil {
				return nil, fmt.Errorf("event %d: %w", r.Sequence, err)
			}
		case *events.AcpDurablePermissionRequest:
			d.req = v
		case *events.AcpDurablePermissionResponse:
			d.resp = v
		default:
			continue
		}
		out = append(out, d)
	}
	return out, nil
}

// readLog reads sid's log and audits it.
func (h *harness) readLog(t testing.TB, sid string) (*eventlogtest.Log, []decoded) {
	t.Helper()
	log := eventlogtest.Audit(t, h.js, "default", events.SessionID(sid))
	evs, err := decodeEvents(log.Events)
	if err != nil {
		t.Fatal(err)
	}
	return log, evs
}

// finishes counts the TurnFinished records among a turn's records.
func finishes(turn *eventlogtest.Turn) int {
	n := 0
	for _, r := range turn.Records {
		if r.Header.Get(events.HeaderRecord) == events.RecordTurnFinished {
			n++
		}
	}
	return n
}

// agentText returns the joined text of the durable agent_message_chunk
// updates among evs that belong to turn id.
func agentText(evs []decoded, turnID string) string {
	return messageText(evs, turnID, "agent_message_chunk")
}

// userText returns the joined text of turnID's user message among evs.
func userText(evs []decoded, turnID string) string {
	return messageText(evs, turnID, "user_message_chunk")
}

// messageText joins the texts of the updates of kind among evs that belong
// to turnID.
func messageText(evs []decoded, turnID, kind string) string {
	var s strings.Builder
	for _, e := range evs {
		if e.turnID == turnID && e.upd != nil && e.upd.SessionUpdate == kind {
			s.WriteString(e.upd.Content.Text)
		}
	}
	return s.String()
}

// iterations is how many rounds a race test runs: n in make test-long, half
// of it in make test (the race tests were a third of the package's time
// beside another run), n/10 (at least 20) with -short.
func iterations(n int) int {
	switch {
	case testing.Short():
		return max(20, n/10)
	case testutil.Long():
		return n
	}
	return n / 2
}

// parallelLoops runs body(sid, i) for i in [0, n) spread over the sessions
// sids, each session's iterations in order and the sessions in parallel. A
// failing iteration stops its session's loop.
func parallelLoops(t *testing.T, sids []string, n int, body func(sid string, i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	for k, sid := range sids {
		wg.Go(func() {
			for i := k; i < n; i += len(sids) {
				if err := body(sid, i); err != nil {
					t.Errorf("%s, iteration %d: %v", sid, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// promptRequest is the prompt of script, with the idempotency key key
// ("": none).
func promptRequest(sid, key, script string) *events.AcpPromptRequest {
	content, _ := json.Marshal([]map[string]string{{"type": "text", "text": script}})
	req := &events.AcpPromptRequest{SessionID: &sid, Content: content}
	if key != "" {
		req.IdempotencyKey = &key
	}
	return req
}

// accept sends a prompt and returns the service's answer: the turn it
// accepted (or joined, or found finished), without waiting for the turn's
// end, which turnwait.Await reads from the log.
func (h *harness) accept(ctx context.Context, sid, key, script string) (*events.PromptAccepted, error) {
	return rpc.Call[events.PromptAccepted](ctx, h.nc, events.APISubject("default", events.OpPrompt), promptRequest(sid, key, script), nil)
}

// audit is readLog for the loops of parallelLoops, whose goroutines must
// not stop the test: it returns what eventlogtest.Audit would fail the test
// with, as one error.
func (h *harness) audit(ctx context.Context, sid string) (*eventlogtest.Log, []decoded, error) {
	log, err := eventlogtest.Read(ctx, h.js, "default", events.SessionID(sid))
	if err != nil {
		return nil, nil, err
	}
	return auditRecords(sid, log)
}

// auditRecords checks log (Log.Check) and decodes its public events.
func auditRecords(sid string, log *eventlogtest.Log) (*eventlogtest.Log, []decoded, error) {
	if problems := log.Check(); len(problems) > 0 {
		return nil, nil, fmt.Errorf("audit %s: %s", sid, strings.Join(problems, "; "))
	}
	evs, err := decodeEvents(log.Events)
	if err != nil {
		return nil, nil, err
	}
	return log, evs, nil
}

// turnsAfter returns the turns of log accepted after sequence after.
func turnsAfter(log *eventlogtest.Log, after uint64) []*eventlogtest.Turn {
	var out []*eventlogtest.Turn
	for _, t := range log.Turns {
		if t.Accepted > after {
			out = append(out, t)
		}
	}
	return out
}
