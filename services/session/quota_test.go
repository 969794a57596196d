package session_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/client/turnwait"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/session"
	"skein.dev/testagent"
)

// quotaRig is a runner of capacity adapters and a session service with
// cfg, on one embedded NATS server, the session API called as a gateway
// calls it: in any namespace, naming a principal or none.
type quotaRig struct {
	t       *testing.T
	srv     *server.Server
	lg      *slog.Logger
	cfg     session.Config
	nc      *nats.Conn
	js      jetstream.JetStream
	control string
	reg     *prometheus.Registry // the first session service's
}

func startQuotaRig(t *testing.T, cfg session.Config, capacity int) *quotaRig {
	t.Helper()
	srv := natstest.Run(t)
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	lg := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	q := &quotaRig{t: t, srv: srv, lg: lg, nc: nc, js: js, control: t.TempDir()}
	runner, err := adapterrunner.New(adapterrunner.Config{
		ID: "r1", DataDir: t.TempDir(), StopGrace: 200 * time.Millisecond, Capacity: capacity,
		Builtin: []adapterrunner.Agent{{ID: "test", Command: testAgent, Env: map[string]string{testagent.EnvControlDir: q.control}}},
	}, lg, natstest.Connect(t, srv), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DrainWait == 0 {
		cfg.DrainWait = 200 * time.Millisecond
	}
	q.cfg = cfg
	run(t, "runner", runner)
	q.reg = q.startSession()
	return q
}

// startSession starts a session service replica and returns its metrics.
func (q *quotaRig) startSession() *prometheus.Registry {
	q.t.Helper()
	reg := prometheus.NewRegistry()
	nc := natstest.Connect(q.t, q.srv)
	svc, err := session.New(q.cfg, q.lg, nc, reg)
	if err != nil {
		q.t.Fatal(err)
	}
	run(q.t, "session", svc)
	flush(q.t, nc)
	return reg
}

// as is the header a gateway sends for principal ("": none).
func as(principal string) nats.Header {
	if principal == "" {
		return nil
	}
	return nats.Header{events.HeaderPrincipal: []string{principal}}
}

func (q *quotaRig) open(t *testing.T, ns events.Namespace, sid, principal string) error {
	t.Helper()
	req := &events.AcpOpenSessionRequest{SessionID: &sid, Agent: "test"}
	_, err := rpc.Call[events.AcpOpenSessionResponse](t.Context(), q.nc, events.APISubject(ns, events.OpOpenSession), req, as(principal))
	return err
}

// pauseTurn starts a turn in sid that stays at a pause named after the
// session until released, and returns once the agent is there: the
// session is busy, and nothing may evict it.
func (q *quotaRig) pauseTurn(t *testing.T, ns events.Namespace, sid, principal string) {
	t.Helper()
	content, _ := json.Marshal([]map[string]string{{"type": "text", "text": "pause " + sid + "\nsay done"}})
	if _, err := turnwait.AcceptWith(t.Context(), q.nc, ns, &events.AcpPromptRequest{SessionID: &sid, Content: content}, as(principal)); err != nil {
		t.Fatalf("prompt %s/%s: %v", ns, sid, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := testagent.WaitPaused(ctx, q.control, sid); err != nil {
		t.Fatalf("%s/%s never paused: %v", ns, sid, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = testagent.Release(ctx, q.control, sid)
	})
}

// prompt runs a turn to its end in sid.
func (q *quotaRig) prompt(t *testing.T, ns events.Namespace, sid, principal, script string) {
	t.Helper()
	content, _ := json.Marshal([]map[string]string{{"type": "text", "text": script}})
	req := &events.AcpPromptRequest{SessionID: &sid, Content: content}
	acc, err := turnwait.AcceptWith(t.Context(), q.nc, ns, req, as(principal))
	if err != nil {
		t.Fatalf("prompt %s/%s: %v", ns, sid, err)
	}
	if _, err := turnwait.Await(t.Context(), q.js, ns, events.SessionID(sid), acc); err != nil {
		t.Fatalf("turn of %s/%s: %v", ns, sid, err)
	}
}

// unloads returns the reasons of sid's SessionUnloaded records, oldest
// first.
func (q *quotaRig) unloads(t *testing.T, ns events.Namespace, sid string) []string {
	t.Helper()
	recs, err := eventlog.Forward(t.Context(), q.js, events.StreamLog, events.LogFilter(ns, events.SessionID(sid)), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, r := range recs {
		if r.Subject != events.LogSubject(ns, events.SessionID(sid), events.LogControl) {
			continue
		}
		if v, err := events.Unmarshal(r.Data); err == nil {
			if u, ok := v.(*events.SessionUnloaded); ok {
				reasons = append(reasons, u.Reason)
			}
		}
	}
	return reasons
}

// wantEvicted checks that exactly the sessions evicted were, of all.
func (q *quotaRig) wantEvicted(t *testing.T, ns events.Namespace, all []string, evicted ...string) {
	t.Helper()
	for _, sid := range all {
		got := strings.Join(q.unloads(t, ns, sid), ",")
		want := ""
		for _, e := range evicted {
			if e == sid {
				want = events.UnloadEvicted
			}
		}
		if got != want {
			t.Errorf("%s/%s unloaded for %q, want %q", ns, sid, got, want)
		}
	}
}

func (q *quotaRig) counter(t *testing.T, name, label string) float64 {
	t.Helper()
	return counter(t, q.reg, name, label)
}

func counter(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestSecurityIdleTenantCannotFillRunners: once, one tenant's
// idle sessions filled the runner, and every other tenant was refused
// "runner full". A runner of three holds three idle sessions of team-a;
// team-b's session still opens, in the slot of team-a's least recently
// used one, which is unloaded (evicted) and restores on its next prompt.
func TestSecurityIdleTenantCannotFillRunners(t *testing.T) {
	q := startQuotaRig(t, session.Config{}, 3)
	a := []string{"a1", "a2", "a3"}
	for _, sid := range a {
		if err := q.open(t, "team-a", sid, "alice"); err != nil {
			t.Fatalf("open team-a/%s: %v", sid, err)
		}
	}
	// a1 was used last of all: a prompt in it makes a2 the least
	// recently used.
	q.prompt(t, "team-a", "a1", "alice", "say hi")
	if err := q.open(t, "team-b", "b1", "bob"); err != nil {
		t.Fatalf("team-b's open with the runner full of team-a's idle sessions: %v", err)
	}
	q.wantEvicted(t, "team-a", a, "a2")
	if got := q.counter(t, "acp_session_evictions_total", "capacity"); got != 1 {
		t.Errorf("acp_session_evictions_total{cause=capacity} = %v, want 1", got)
	}
	// The evicted session comes back on its next prompt, in the slot of
	// the least recently used one then: a3.
	q.prompt(t, "team-a", "a2", "alice", "say back")
	q.wantEvicted(t, "team-a", a, "a2", "a3")

	// With nothing idle, the refusal is as before: every adapter is in a
	// turn, so none is evicted.
	for _, s := range []struct {
		ns  events.Namespace
		sid string
	}{{"team-a", "a1"}, {"team-a", "a2"}, {"team-b", "b1"}} {
		q.pauseTurn(t, s.ns, s.sid, "")
	}
	err := q.open(t, "team-b", "b2", "bob")
	if e := events.AsError(err); e == nil || e.Code != events.CodeAgentUnavailable || !strings.Contains(e.Message, "3 of 3 adapters") {
		t.Fatalf("open with every adapter busy = %v, want agent_unavailable: runner full", err)
	}
}

// TestSecurityNamespaceQuota: a namespace at its quota of live adapters
// makes room from its own idle ones, least recently used first, and is
// refused rate_limited, naming the quota, when all are busy; other
// namespaces' adapters are never touched for it.
func TestSecurityNamespaceQuota(t *testing.T) {
	q := startQuotaRig(t, session.Config{MaxAdaptersPerNamespace: session.Quota{N: 2}}, 10)
	if err := q.open(t, "team-b", "b1", ""); err != nil {
		t.Fatal(err)
	}
	for _, sid := range []string{"a1", "a2"} {
		if err := q.open(t, "team-a", sid, ""); err != nil {
			t.Fatalf("open team-a/%s: %v", sid, err)
		}
	}
	if err := q.open(t, "team-a", "a3", ""); err != nil {
		t.Fatalf("team-a's third session, with an idle one to evict: %v", err)
	}
	q.wantEvicted(t, "team-a", []string{"a1", "a2", "a3"}, "a1")
	q.wantEvicted(t, "team-b", []string{"b1"})
	if got := q.counter(t, "acp_session_evictions_total", "namespace_quota"); got != 1 {
		t.Errorf("acp_session_evictions_total{cause=namespace_quota} = %v, want 1", got)
	}

	q.pauseTurn(t, "team-a", "a2", "")
	q.pauseTurn(t, "team-a", "a3", "")
	err := q.open(t, "team-a", "a4", "")
	if e := events.AsError(err); e == nil || e.Code != events.CodeRateLimited ||
		!strings.Contains(e.Message, `namespace "team-a" is at its quota of 2 live adapters (session.max-adapters-per-namespace)`) {
		t.Fatalf("team-a's third live adapter with both busy = %v, want rate_limited naming the namespace quota", err)
	}
	if got := q.counter(t, "acp_session_quota_refusals_total", "namespace"); got != 1 {
		t.Errorf("acp_session_quota_refusals_total{quota=namespace} = %v, want 1", got)
	}
	// Another namespace is not held to team-a's count.
	if err := q.open(t, "team-b", "b2", ""); err != nil {
		t.Fatalf("team-b's second session: %v", err)
	}
	q.wantEvicted(t, "team-b", []string{"b1", "b2"})
}

// TestSecurityPrincipalQuota: a principal (the gateway's Acp-Principal)
// at its quota makes room from its own idle adapters, in any namespace,
// and is refused when all are busy; another principal of the same
// namespace is not.
func TestSecurityPrincipalQuota(t *testing.T) {
	q := startQuotaRig(t, session.Config{MaxAdaptersPerPrincipal: session.Quota{N: 2}}, 10)
	if err := q.open(t, "team-a", "carol1", "carol"); err != nil {
		t.Fatal(err)
	}
	if err := q.open(t, "team-a", "m1", "mallory"); err != nil {
		t.Fatal(err)
	}
	if err := q.open(t, "team-b", "m2", "mallory"); err != nil {
		t.Fatal(err)
	}
	if err := q.open(t, "team-a", "m3", "mallory"); err != nil {
		t.Fatalf("mallory's third session, with an idle one to evict: %v", err)
	}
	q.wantEvicted(t, "team-a", []string{"carol1", "m1", "m3"}, "m1")
	q.wantEvicted(t, "team-b", []string{"m2"})
	if got := q.counter(t, "acp_session_evictions_total", "principal_quota"); got != 1 {
		t.Errorf("acp_session_evictions_total{cause=principal_quota} = %v, want 1", got)
	}

	q.pauseTurn(t, "team-b", "m2", "mallory")
	q.pauseTurn(t, "team-a", "m3", "mallory")
	err := q.open(t, "team-a", "m4", "mallory")
	if e := events.AsError(err); e == nil || e.Code != events.CodeRateLimited ||
		!strings.Contains(e.Message, `principal "mallory" is at its quota of 2 live adapters (session.max-adapters-per-principal)`) {
		t.Fatalf("mallory's third live adapter with both busy = %v, want rate_limited naming the principal quota", err)
	}
	// The principal's prompt that would restore an adapter is held to it
	// too: m1's restore is refused while mallory's two are busy.
	content, _ := json.Marshal([]map[string]string{{"type": "text", "text": "say hi"}})
	sid := "m1"
	_, err = turnwait.AcceptWith(t.Context(), q.nc, "team-a", &events.AcpPromptRequest{SessionID: &sid, Content: content}, as("mallory"))
	if code(err) != events.CodeRateLimited {
		t.Fatalf("mallory's prompt restoring a third adapter = %v, want rate_limited", err)
	}
	if got := q.counter(t, "acp_session_quota_refusals_total", "principal"); got != 2 {
		t.Errorf("acp_session_quota_refusals_total{quota=principal} = %v, want 2", got)
	}
	if err := q.open(t, "team-a", "carol2", "carol"); err != nil {
		t.Fatalf("carol's second session: %v", err)
	}
	q.wantEvicted(t, "team-a", []string{"carol1", "carol2"})
}

func TestQuotaFlag(t *testing.T) {
	for in, want := range map[string]session.Quota{"0": {}, "7": {N: 7}, "50%": {N: 50, Percent: true}} {
		var q session.Quota
		if err := q.Set(in); err != nil || q != want || q.String() != in {
			t.Errorf("Set(%q) = %v, %+v (%s); want %+v", in, err, q, q.String(), want)
		}
	}
	for _, in := range []string{"-1", "101%", "x", ""} {
		var q session.Quota
		if err := q.Set(in); err == nil {
			t.Errorf("Set(%q) = nil, want an error", in)
		}
	}
}

// TestSecurityQuotaAcrossReplicas: the count is the cluster's, not a
// replica's. team-a's two adapters are attached by one replica; its third,
// opened on the other, evicts the first one's least recently used, which
// its owner unloads; and with both left busy, an open on the first
// replica is refused, counting the adapter the second attached.
func TestSecurityQuotaAcrossReplicas(t *testing.T) {
	q := startQuotaRig(t, session.Config{MaxAdaptersPerNamespace: session.Quota{N: 2}}, 10)
	for _, sid := range []string{"a1", "a2"} {
		if err := q.open(t, "team-a", sid, ""); err != nil {
			t.Fatalf("open team-a/%s: %v", sid, err)
		}
	}
	first, err := otherReplica(t.Context(), q.nc, "")
	if err != nil {
		t.Fatal(err)
	}
	reg2 := q.startSession()
	second, err := otherReplica(t.Context(), q.nc, first)
	if err != nil {
		t.Fatal(err)
	}
	on := func(replica, sid string) error {
		req := &events.AcpOpenSessionRequest{SessionID: &sid, Agent: "test"}
		_, err := rpc.Call[events.AcpOpenSessionResponse](t.Context(), q.nc, events.OwnerSubject(replica, "team-a", events.OpOpenSession), req, nil)
		return err
	}
	if err := on(second, "a3"); err != nil {
		t.Fatalf("team-a's third session, on the other replica, with an idle one to evict: %v", err)
	}
	q.wantEvicted(t, "team-a", []string{"a1", "a2", "a3"}, "a1")
	if got := counter(t, reg2, "acp_session_evictions_total", "namespace_quota"); got != 1 {
		t.Errorf("the second replica's acp_session_evictions_total{cause=namespace_quota} = %v, want 1", got)
	}

	q.pauseTurn(t, "team-a", "a2", "")
	q.pauseTurn(t, "team-a", "a3", "")
	if err := on(first, "a4"); code(err) != events.CodeRateLimited {
		t.Fatalf("team-a's third live adapter on the first replica, with the second's busy = %v, want rate_limited", err)
	}
}
