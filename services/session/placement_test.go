package session_test

import (
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// Placement says why no runner takes a session: the agent is not
// installed where it is known, or no runner that has it has room, or no
// runner knows it.
func TestPlacementSaysWhyNoRunner(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	lg := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	ghost := adapterrunner.Agent{ID: "ghost", Command: "/nonexistent/ghost-acp"}
	control := t.TempDir()
	for _, cfg := range []adapterrunner.Config{
		{ID: "r1", Capacity: 1, Builtin: []adapterrunner.Agent{{ID: "test", Command: testAgent, Env: map[string]string{testagent.EnvControlDir: control}}, ghost}},
		{ID: "r2", Builtin: []adapterrunner.Agent{ghost}},
	} {
		cfg.DataDir, cfg.StopGrace = t.TempDir(), 200*time.Millisecond
		r, err := adapterrunner.New(cfg, lg, natstest.Connect(t, ns), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		run(t, "runner "+cfg.ID, r)
	}
	svc, err := session.New(session.Config{}, lg, natstest.Connect(t, ns), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	run(t, "session", svc)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{nc: nc, js: js, control: control}

	if err := h.open(t, "first", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatalf("open the one session r1 has room for: %v", err)
	}
	// An idle adapter would be evicted to make room (evict.go): first's
	// is in a turn.
	done := h.promptAsync(t.Context(), "first", "", "pause first\nsay done")
	if err := testagent.WaitPaused(t.Context(), control, "first"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = testagent.Release(t.Context(), control, "first")
		<-done
	}()
	for _, tc := range []struct {
		agent string
		code  events.Code
		says  string
	}{
		// Placement or r1 itself, whichever sees r1's load first: either
		// way the error says the runner is full, and by how much.
		{"test", events.CodeAgentUnavailable, "1 of 1 adapters"},
		{"ghost", events.CodeAgentNotInstalled, `agent "ghost" is not installed: its command "/nonexistent/ghost-acp" does not resolve on runner r1, r2`},
		{"nobody", events.CodeUnknownAgent, `no runner knows agent "nobody"`},
	} {
		err := h.open(t, "s-"+tc.agent, events.AcpOpenSessionRequest{Agent: tc.agent})
		if e := events.AsError(err); e == nil || e.Code != tc.code || !strings.Contains(e.Message, tc.says) {
			t.Errorf("open with agent %s = %v, want %s saying %q", tc.agent, err, tc.code, tc.says)
		}
	}
}

// startEdge starts, on the rig's server, a runner like those of skein
// runner --join: labelled where=laptop, hosting only the sessions placed
// on it, with the test agent and one agent no other runner has
// ("edgeonly"). It returns the function that stops it.
func (r *rig) startEdge(id string, capacity int) (stop func()) {
	r.t.Helper()
	env := map[string]string{testagent.EnvControlDir: r.control}
	return r.st.StartRunner(adapterrunner.Config{
		ID: id, DataDir: r.t.TempDir(), Capacity: capacity,
		Labels: map[string]string{"where": "laptop"}, PlacedOnly: true,
		Builtin: []adapterrunner.Agent{
			{ID: "test", Command: testAgent, Env: env},
			{ID: "edgeonly", Command: testAgent, Env: env},
		},
	}, r.connect())
}

func onRunner(id string) *events.Placement { return &events.Placement{Runner: &id} }

func byLabels(kv ...string) *events.Placement {
	p := &events.Placement{Labels: map[string]string{}}
	for i := 0; i < len(kv); i += 2 {
		p.Labels[kv[i]] = kv[i+1]
	}
	return p
}

// wantAttachedOn checks that sid's newest adapter is on runner.
func (h *harness) wantAttachedOn(t *testing.T, sid, runner string) {
	t.Helper()
	a, err := h.lastAttached(t.Context(), sid)
	if err != nil {
		t.Fatalf("%s: %v", sid, err)
	}
	if a.RunnerID != runner {
		t.Errorf("%s's adapter is on runner %s, want %s", sid, a.RunnerID, runner)
	}
}

// wantErr checks that err has code and says says.
func wantErr(t *testing.T, what string, err error, c events.Code, says string) {
	t.Helper()
	if e := events.AsError(err); e == nil || e.Code != c || !strings.Contains(e.Message, says) {
		t.Errorf("%s = %v, want %s saying %q", what, err, c, says)
	}
}

// A placement pins a session to one runner, named or chosen by labels, at
// open: the runner is recorded, and shown by getSession. An unplaced
// session never goes to a placed-only runner, however idle. No runner to
// pin to is agent_unavailable naming the runner or the labels, and leaves
// no session; a reopen must name the same placement.
func TestPlacementPinsAtOpen(t *testing.T) {
	h := startRig(t, session.Config{})
	h.startEdge("laptop", 0)

	// r1 takes both: laptop, emptier after the first, is placed-only.
	for _, sid := range []string{"free1", "free2"} {
		if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
			t.Fatal(err)
		}
		h.wantAttachedOn(t, sid, "r1")
		if r := h.getSession(t, sid).Runner; r != "" {
			t.Errorf("getSession(%s).runner = %q, want none", sid, r)
		}
	}
	err := h.open(t, "free3", events.AcpOpenSessionRequest{Agent: "edgeonly"})
	wantErr(t, "an unplaced open of an agent only laptop has", err, events.CodeAgentUnavailable,
		`agent "edgeonly" is offered only by runners that host placed sessions only (laptop)`)

	for _, tc := range []struct {
		sid       string
		placement *events.Placement
		labels    map[string]string
	}{
		{"named", onRunner("laptop"), nil},
		{"labelled", byLabels("where", "laptop"), map[string]string{"where": "laptop"}},
		{"edge", &events.Placement{Runner: new("laptop")}, nil},
	} {
		req := events.AcpOpenSessionRequest{Placement: tc.placement}
		if tc.sid == "edge" {
			req.Agent = "edgeonly"
		}
		if err := h.open(t, tc.sid, req); err != nil {
			t.Fatalf("open %s: %v", tc.sid, err)
		}
		h.wantAttachedOn(t, tc.sid, "laptop")
		if r := h.getSession(t, tc.sid).Runner; r != "laptop" {
			t.Errorf("getSession(%s).runner = %q, want laptop", tc.sid, r)
		}
		recs, err := h.ctl(t.Context(), tc.sid)
		if err != nil {
			t.Fatal(err)
		}
		if o, ok := recs[0].(*events.SessionOpened); !ok || o.Runner != "laptop" || !maps.Equal(o.Labels, tc.labels) {
			t.Errorf("%s's first record = %+v, want SessionOpened pinned to laptop by labels %v", tc.sid, recs[0], tc.labels)
		}
	}

	for _, tc := range []struct {
		name string
		req  events.AcpOpenSessionRequest
		says string
	}{
		{"a runner not connected", events.AcpOpenSessionRequest{Placement: onRunner("nowhere")}, "runner nowhere is not connected"},
		{"labels no runner has", events.AcpOpenSessionRequest{Placement: byLabels("where", "moon")}, `no connected runner has labels where=moon and offers agent "test"`},
		{"labels of two runners", events.AcpOpenSessionRequest{Placement: byLabels("where", "laptop", "gpu", "yes")}, `no connected runner has labels gpu=yes,where=laptop and offers agent "test"`},
		{"labels without the agent", events.AcpOpenSessionRequest{Agent: "stubborn", Placement: byLabels("where", "laptop")}, `no connected runner has labels where=laptop and offers agent "stubborn"`},
		{"a runner without the agent", events.AcpOpenSessionRequest{Agent: "stubborn", Placement: onRunner("laptop")}, `runner laptop does not offer agent "stubborn"`},
	} {
		err := h.open(t, "refused", tc.req)
		wantErr(t, "open with "+tc.name, err, events.CodeAgentUnavailable, tc.says)
		if n, err := h.countCtl(t.Context(), "refused", "SessionOpened"); err != nil || n != 0 {
			t.Errorf("open with %s left %d SessionOpened records (%v), want none", tc.name, n, err)
		}
	}
	wantErr(t, "open with an invalid placement", h.open(t, "refused", events.AcpOpenSessionRequest{Placement: &events.Placement{}}),
		events.CodeInvalidRequest, "placement")

	// A reopen names the placement of the open, or the runner it chose;
	// another is session_conflict, naming where the session is.
	for _, tc := range []struct {
		sid       string
		placement *events.Placement
		conflict  string // "": none
	}{
		{"named", onRunner("laptop"), ""},
		{"named", nil, "session named exists pinned to runner laptop"},
		{"named", byLabels("where", "laptop"), "session named exists pinned to runner laptop"},
		{"named", onRunner("r1"), "session named exists pinned to runner laptop"},
		{"labelled", byLabels("where", "laptop"), ""},
		{"labelled", onRunner("laptop"), ""},
		{"labelled", byLabels("where", "moon"), "session labelled exists pinned to runner laptop by labels where=laptop"},
		{"labelled", nil, "session labelled exists pinned to runner laptop by labels where=laptop"},
		{"free1", nil, ""},
		{"free1", onRunner("r1"), "session free1 exists without a placement"},
	} {
		err := h.open(t, tc.sid, events.AcpOpenSessionRequest{Placement: tc.placement})
		what := fmt.Sprintf("reopen %s with %+v", tc.sid, tc.placement)
		if tc.conflict == "" {
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
			continue
		}
		wantErr(t, what, err, events.CodeSessionConflict, tc.conflict)
	}
}

// A pinned session's adapter only ever goes to its runner: restored there
// after an unload, and by a new session service, however loaded it is
// beside the others. While its runner is away, its prompts answer
// agent_unavailable naming the runner; once a runner with that ID is
// back, the session works again, there.
func TestPinnedSessionWaitsForItsRunner(t *testing.T) {
	h := startRig(t, session.Config{})
	stopLaptop := h.startEdge("laptop", 0)
	ctx := t.Context()
	for _, sid := range []string{"pinned", "labelled"} {
		p := onRunner("r1") // an ordinary runner may be named too
		if sid == "labelled" {
			p = byLabels("where", "laptop")
		}
		if err := h.open(t, sid, events.AcpOpenSessionRequest{Placement: p}); err != nil {
			t.Fatal(err)
		}
	}
	h.wantAttachedOn(t, "pinned", "r1")
	h.wantAttachedOn(t, "labelled", "laptop")
	// laptop takes a second session: r1, with one adapter, is now the
	// less loaded of the two.
	if err := h.open(t, "second", events.AcpOpenSessionRequest{Placement: byLabels("where", "laptop")}); err != nil {
		t.Fatal(err)
	}
	h.wantAttachedOn(t, "second", "laptop")

	// Restored after an unload: on laptop again.
	h.unload(t, "labelled")
	if _, err := h.prompt(ctx, "labelled", "", "say restored"); err != nil {
		t.Fatalf("prompt after an unload: %v", err)
	}
	h.wantAttachedOn(t, "labelled", "laptop")

	// laptop goes away: its adapters' exits are recorded, and the
	// sessions on it wait for it, never moving to r1.
	stopLaptop()
	for _, sid := range []string{"labelled", "second"} {
		if err := testutil.Poll(ctx, sid+"'s adapter exit", func() (bool, error) {
			n, err := h.countCtl(ctx, sid, "AcpAgentExitedEvent")
			return n > 0, err
		}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		_, err := h.prompt(ctx, "labelled", "", "say where")
		wantErr(t, "a prompt while laptop is away", err, events.CodeAgentUnavailable,
			"runner laptop is not connected; session labelled is pinned to it")
	}
	// A new owner knows it too.
	h.stopSvc()
	h.startSession()
	_, err := h.prompt(ctx, "second", "", "say where")
	wantErr(t, "a prompt to a new owner while laptop is away", err, events.CodeAgentUnavailable,
		"runner laptop is not connected; session second is pinned to it")
	if _, err := h.prompt(ctx, "pinned", "", "say r1 still works"); err != nil {
		t.Fatalf("a session pinned to r1: %v", err)
	}

	// laptop is back, under the same ID: the sessions work again, there.
	h.startEdge("laptop", 0)
	for _, sid := range []string{"labelled", "second"} {
		if _, err := h.prompt(ctx, sid, "", "say back"); err != nil {
			t.Fatalf("prompt %s once laptop is back: %v", sid, err)
		}
		h.wantAttachedOn(t, sid, "laptop")
		n, err := h.countCtl(ctx, sid, "AdapterAttached")
		if err != nil {
			t.Fatal(err)
		}
		want := 2 // the open's, and the one now
		if sid == "labelled" {
			want = 3 // and the restore after the unload
		}
		if n != want {
			t.Errorf("%s has %d AdapterAttached records, want %d: an attach went elsewhere or was tried twice", sid, n, want)
		}
		h.readLog(t, sid)
	}
	// A fork is pinned where its source is.
	if _, err := h.fork(ctx, "labelled", "forked", nil); err != nil {
		t.Fatal(err)
	}
	if r := h.getSession(t, "forked").Runner; r != "laptop" {
		t.Errorf("getSession(forked).runner = %q, want laptop", r)
	}
	if _, err := h.prompt(ctx, "forked", "", "say forked"); err != nil {
		t.Fatal(err)
	}
	h.wantAttachedOn(t, "forked", "laptop")
}

// A pinned session whose runner is full makes room there, by evicting
// the least recently used idle adapter on it, never on another runner.
func TestPinnedSessionEvictsOnItsRunner(t *testing.T) {
	h := startRig(t, session.Config{})
	h.startEdge("laptop", 1)
	if err := h.open(t, "free", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	for _, sid := range []string{"first", "second"} {
		if err := h.open(t, sid, events.AcpOpenSessionRequest{Placement: onRunner("laptop")}); err != nil {
			t.Fatalf("open %s: %v", sid, err)
		}
		h.wantAttachedOn(t, sid, "laptop")
	}
	if n, err := h.countCtl(t.Context(), "first", "SessionUnloaded"); err != nil || n != 1 {
		t.Errorf("first has %d SessionUnloaded records (%v), want 1: evicted to make room on laptop", n, err)
	}
	if n, err := h.countCtl(t.Context(), "free", "SessionUnloaded"); err != nil || n != 0 {
		t.Errorf("free, on r1, has %d SessionUnloaded records (%v), want none", n, err)
	}
	// With the only adapter on laptop in a turn, nothing can go.
	done := h.promptAsync(t.Context(), "second", "", "pause second\nsay done")
	if err := testagent.WaitPaused(t.Context(), h.control, "second"); err != nil {
		t.Fatal(err)
	}
	_, err := h.prompt(t.Context(), "first", "", "say again")
	wantErr(t, "a prompt with laptop full", err, events.CodeAgentUnavailable, "1 of 1 adapters")
	if err := testagent.Release(t.Context(), h.control, "second"); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
}

// A pinned session whose runner is cut off NATS, its heartbeat not yet
// gone, does not wait for it either: the attach finds nobody to answer
// and the prompt is agent_unavailable naming the runner, not unavailable
// to retry elsewhere.
func TestPinnedSessionRunnerCutOff(t *testing.T) {
	h := startRig(t, session.Config{})
	if err := h.open(t, "cut", events.AcpOpenSessionRequest{Placement: onRunner("r1")}); err != nil {
		t.Fatal(err)
	}
	h.unload(t, "cut")
	h.partitionRunner()
	h.startRunner("r2") // another runner with the agent, which the session must not use
	_, err := h.prompt(t.Context(), "cut", "", "say where")
	if e := events.AsError(err); e == nil || e.Code != events.CodeAgentUnavailable || !strings.Contains(e.Message, "runner r1 ") ||
		!strings.HasSuffix(e.Message, "session cut is pinned to it") {
		t.Errorf("prompt with r1 cut off = %v, want agent_unavailable naming r1 and the pin", err)
	}
	if n, err := h.countCtl(t.Context(), "cut", "AdapterAttached"); err != nil || n != 1 {
		t.Errorf("cut has %d AdapterAttached records (%v), want only the open's", n, err)
	}
}
