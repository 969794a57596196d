package history_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	"skein.dev/pkg/events/streams"
	"skein.dev/services/history"
)

type harness struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// start runs the history service on an embedded NATS whose streams keep at
// most maxEvents records per subject.
func start(t *testing.T, maxEvents int64) *harness {
	t.Helper()
	return startWith(t, streams.Options{MaxEventsPerSession: maxEvents})
}

// startWith runs the history service on an embedded NATS whose streams are
// provisioned with o.
func startWith(t *testing.T, o streams.Options) *harness {
	t.Helper()
	h := provision(t, o)
	serve(t, h.nc, history.Config{DefaultLimit: 5})
	return h
}

// provision starts an embedded NATS and provisions its streams with o;
// nothing serves them yet.
func provision(tb testing.TB, o streams.Options) *harness {
	tb.Helper()
	nc := natstest.Connect(tb, natstest.Run(tb))
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	if err := streams.Provision(tb.Context(), js, o, true); err != nil {
		tb.Fatal(err)
	}
	return &harness{nc: nc, js: js}
}

// serve runs a history service on nc until the test ends, and returns once
// it serves requests.
func serve(tb testing.TB, nc *nats.Conn, cfg history.Config) {
	tb.Helper()
	svc, err := history.New(cfg, slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})), nc, prometheus.NewRegistry())
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(tb.Context())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Run: %v", err)
		}
	})
	<-svc.Ready()
}

// write appends n public events to sid, interleaved with another session's
// and with a control record, and returns their sequences.
func (h *harness) write(t *testing.T, sid events.SessionID, n int) []uint64 {
	t.Helper()
	w := eventlog.NewWriter(h.js, "default", sid, eventlog.Position{}, "w")
	other := eventlog.NewWriter(h.js, "default", "other-"+sid, eventlog.Position{}, "w")
	if _, err := w.Append(t.Context(), eventlog.Entry{Kind: events.LogControl, Value: &events.SessionOpened{Agent: "test"}}); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for i := range n {
		a, err := w.Append(t.Context(), eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurableSessionUpdate{
			Update: events.JSON(fmt.Sprintf(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"m%d"}}`, i)),
		}})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, a[0].Seq)
		if _, err := other.Append(t.Context(), eventlog.Entry{Kind: events.LogEvents, Value: &events.AcpDurableSessionUpdate{Update: events.JSON(`{"sessionUpdate":"plan","entries":[]}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	return seqs
}

func (h *harness) read(t *testing.T, req *events.AcpReadHistoryRequest) (*events.AcpHistoryPageResponse, error) {
	t.Helper()
	return rpc.Call[events.AcpHistoryPageResponse](t.Context(), h.nc, events.APISubject("default", events.OpReadHistory), req, nil)
}

func seqsOf(p *events.AcpHistoryPageResponse) []uint64 {
	var out []uint64
	for _, e := range p.Events {
		out = append(out, e.Sequence)
	}
	return out
}

func TestPages(t *testing.T) {
	h := start(t, 0)
	seqs := h.write(t, "s1", 12)
	sid := new("s1")
	for _, tc := range []struct {
		name                string
		req                 events.AcpReadHistoryRequest
		want                []uint64
		moreBefore, moreAft bool
	}{
		{"newest page", events.AcpReadHistoryRequest{SessionID: sid}, seqs[7:], true, false},
		{"from the start", events.AcpReadHistoryRequest{SessionID: sid, After: new(uint64(0))}, seqs[:5], false, true},
		{"after a cursor", events.AcpReadHistoryRequest{SessionID: sid, After: &seqs[4], Limit: new(uint32(3))}, seqs[5:8], true, true},
		{"the last page", events.AcpReadHistoryRequest{SessionID: sid, After: &seqs[8], Limit: new(uint32(10))}, seqs[9:], true, false},
		{"after the end", events.AcpReadHistoryRequest{SessionID: sid, After: &seqs[11]}, nil, true, false},
		{"before a cursor", events.AcpReadHistoryRequest{SessionID: sid, Before: &seqs[6], Limit: new(uint32(3))}, seqs[3:6], true, true},
		{"before the start", events.AcpReadHistoryRequest{SessionID: sid, Before: &seqs[2], Limit: new(uint32(10))}, seqs[:2], false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page, err := h.read(t, &tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := seqsOf(page); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("sequences = %v, want %v", got, tc.want)
			}
			if page.HasMoreBefore != tc.moreBefore || page.HasMoreAfter != tc.moreAft {
				t.Errorf("hasMoreBefore, hasMoreAfter = %v, %v, want %v, %v", page.HasMoreBefore, page.HasMoreAfter, tc.moreBefore, tc.moreAft)
			}
			for _, e := range page.Events {
				if e.SessionID != "s1" || e.Timestamp == "" || e.EventNo == 0 {
					t.Errorf("entry %+v lacks its envelope", e)
				}
			}
		})
	}
}

func TestErrors(t *testing.T) {
	h := start(t, 0)
	h.write(t, "s1", 3)
	for _, tc := range []struct {
		name string
		req  events.Variant
		want events.Code
	}{
		{"unknown session", &events.AcpReadHistoryRequest{SessionID: new("nope")}, events.CodeSessionNotFound},
		{"invalid session ID", &events.AcpReadHistoryRequest{SessionID: new("a.b")}, events.CodeInvalidSessionID},
		{"before and after", &events.AcpReadHistoryRequest{SessionID: new("s1"), Before: new(uint64(9)), After: new(uint64(1))}, events.CodeInvalidCursor},
		{"limit zero", &events.AcpReadHistoryRequest{SessionID: new("s1"), Limit: new(uint32(0))}, events.CodeInvalidRequest},
		{"limit too large", &events.AcpReadHistoryRequest{SessionID: new("s1"), Limit: new(uint32(events.MaxHistoryLimit + 1))}, events.CodeInvalidRequest},
		{"wrong request type", &events.AcpPromptRequest{Content: events.JSON("[]")}, events.CodeInvalidPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rpc.Request(t.Context(), h.nc, events.APISubject("default", events.OpReadHistory), tc.req, nil)
			if e := events.AsError(err); e == nil || e.Code != tc.want {
				t.Errorf("readHistory = %v, want %s", err, tc.want)
			}
		})
	}
	msg, err := h.nc.RequestWithContext(t.Context(), events.APISubject("default", events.OpReadHistory), []byte("garbage"))
	if err != nil {
		t.Fatal(err)
	}
	if e := events.AsError(rpc.ReplyError(msg)); e == nil || e.Code != events.CodeInvalidPayload {
		t.Errorf("garbage request = %v, want %s", e, events.CodeInvalidPayload)
	}
}

// A cursor into pruned history is cursor_expired, never a silent skip.
func TestCursorExpired(t *testing.T) {
	h := start(t, 5)
	seqs := h.write(t, "s1", 12) // keeps the last 5
	if _, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: new("s1"), After: &seqs[2]}); events.AsError(err).Code != events.CodeCursorExpired {
		t.Errorf("after a pruned event = %v, want %s", err, events.CodeCursorExpired)
	}
	if _, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: new("s1"), Before: &seqs[7]}); events.AsError(err).Code != events.CodeCursorExpired {
		t.Errorf("before the oldest retained event = %v, want %s", err, events.CodeCursorExpired)
	}
	// The newest page still reads what is retained, and its event numbers
	// show the gap.
	page, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: new("s1"), Limit: new(uint32(50))})
	if err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(page); fmt.Sprint(got) != fmt.Sprint(seqs[7:]) {
		t.Errorf("newest page = %v, want the retained %v", got, seqs[7:])
	}
	if page.Events[0].EventNo != 8 || page.HasMoreBefore {
		t.Errorf("oldest retained eventNo = %d (hasMoreBefore %v), want 8 and false: the gap shows the pruning", page.Events[0].EventNo, page.HasMoreBefore)
	}
}

// A cursor past the newest event is an empty page, the largest sequence
// too: after+1 once wrapped to 0, and the page was the whole history.
func TestSecurityCursorPastTheEnd(t *testing.T) {
	for _, maxEvents := range []int64{0, 5} { // whole, and pruned
		h := start(t, maxEvents)
		seqs := h.write(t, "s1", 12)
		for _, after := range []uint64{seqs[11], seqs[11] + 1, math.MaxUint64 - 1, math.MaxUint64} {
			page, err := h.read(t, &events.AcpReadHistoryRequest{SessionID: new("s1"), After: &after})
			if err != nil || len(page.Events) != 0 || page.HasMoreAfter {
				t.Errorf("kept %d: after=%d = %v, %v; want an empty page, nothing more after", maxEvents, after, page, err)
			}
		}
	}
}

func TestGetSession(t *testing.T) {
	h := start(t, 0)
	seqs := h.write(t, "s1", 2)
	kv, err := h.js.KeyValue(t.Context(), events.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	meta := &events.SessionMeta{Namespace: "default", Info: events.AcpDurableSessionInfo{SessionID: "s1", Agent: "test", State: events.JSON(`{"status":"idle"}`), AdditionalDirectories: events.JSON("[]")}}
	data, _ := events.Marshal(meta)
	if _, err := kv.Put(t.Context(), events.SessionKey("default", "s1"), data); err != nil {
		t.Fatal(err)
	}
	got, err := rpc.Call[events.AcpGetDurableSessionResponse](t.Context(), h.nc, events.APISubject("default", events.OpGetSession), &events.AcpGetDurableSessionRequest{SessionID: new("s1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Session.Agent != "test" || got.Session.LatestSequence != seqs[1] {
		t.Errorf("getSession = %+v, want agent test and latestSequence %d", got.Session, seqs[1])
	}
	_, err = rpc.Call[events.AcpGetDurableSessionResponse](t.Context(), h.nc, events.APISubject("default", events.OpGetSession), &events.AcpGetDurableSessionRequest{SessionID: new("nope")}, nil)
	if events.AsError(err).Code != events.CodeSessionNotFound {
		t.Errorf("getSession(nope) = %v, want %s", err, events.CodeSessionNotFound)
	}
}

func TestListAgents(t *testing.T) {
	h := start(t, 0)
	kv, err := h.js.KeyValue(t.Context(), events.BucketRunners)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []events.RunnerInfo{
		{ID: "r2", Agents: []events.AcpAgentEntry{{ID: "codex", Installed: true, AdapterEntrypoint: "/usr/local/bin/codex-acp"}, {ID: "gemini", Installed: false, AdapterEntrypoint: "gemini"}},
			Capacity: 4, Load: 1},
		{ID: "r1", Agents: []events.AcpAgentEntry{{ID: "test", Installed: true, AdapterEntrypoint: "/bin/skein"}, {ID: "codex", Installed: false, AdapterEntrypoint: "codex-acp"}},
			Capacity: 4},
		{ID: "laptop", Agents: []events.AcpAgentEntry{{ID: "test", Installed: true, AdapterEntrypoint: "/home/me/skein"}},
			Capacity: 2, Load: 2, Labels: map[string]string{"where": "laptop"}, PlacedOnly: true},
	} {
		data, _ := events.Marshal(&r)
		if _, err := kv.Put(t.Context(), r.ID, data); err != nil {
			t.Fatal(err)
		}
	}
	got, err := rpc.Call[events.AcpListAgentsResponse](t.Context(), h.nc, events.APISubject("default", events.OpListAgents), &events.AcpListAgentsRequest{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []events.AcpAgentEntry{
		{ID: "codex", Installed: true, AdapterEntrypoint: "/usr/local/bin/codex-acp"},
		{ID: "gemini", Installed: false, AdapterEntrypoint: "gemini"},
		{ID: "test", Installed: true, AdapterEntrypoint: "/bin/skein"},
	}
	if fmt.Sprint(got.Agents) != fmt.Sprint(want) {
		t.Errorf("listAgents = %+v, want %+v", got.Agents, want)
	}
	// Which runner offers what, and what placement knows of each: by
	// ID, each runner's agents by ID.
	wantRunners := []events.RunnerEntry{
		{ID: "laptop", Agents: []events.AcpAgentEntry{{ID: "test", Installed: true, AdapterEntrypoint: "/home/me/skein"}},
			Capacity: 2, Load: 2, Labels: map[string]string{"where": "laptop"}, PlacedOnly: true},
		{ID: "r1", Agents: []events.AcpAgentEntry{{ID: "codex", Installed: false, AdapterEntrypoint: "codex-acp"}, {ID: "test", Installed: true, AdapterEntrypoint: "/bin/skein"}},
			Capacity: 4},
		{ID: "r2", Agents: []events.AcpAgentEntry{{ID: "codex", Installed: true, AdapterEntrypoint: "/usr/local/bin/codex-acp"}, {ID: "gemini", Installed: false, AdapterEntrypoint: "gemini"}},
			Capacity: 4, Load: 1},
	}
	if !reflect.DeepEqual(got.Runners, wantRunners) {
		t.Errorf("listAgents runners = %+v, want %+v", got.Runners, wantRunners)
	}
}

// The cached getters answer from the projection alone.
func TestCachedGetters(t *testing.T) {
	h := start(t, 0)
	kv, err := h.js.KeyValue(t.Context(), events.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	meta := &events.SessionMeta{
		Info:              events.AcpDurableSessionInfo{SessionID: "s1", State: events.JSON(`{}`), AdditionalDirectories: events.JSON(`[]`)},
		AgentCapabilities: events.JSON(`{"loadSession":true}`),
		AgentInfo:         events.JSON(`{"name":"a","version":"1"}`),
		ConfigRevision:    3,
		ConfigOptions:     []events.JSON{events.JSON(`{"id":"mode"}`), events.JSON(`{"id":"model"}`)},
	}
	data, _ := events.Marshal(meta)
	if _, err := kv.Put(t.Context(), events.SessionKey("default", "s1"), data); err != nil {
		t.Fatal(err)
	}
	sid := "s1"
	cfg, err := rpc.Call[events.AcpSessionConfigResponse](t.Context(), h.nc, events.APISubject("default", events.OpGetSessionConfig), &events.AcpGetSessionConfigRequest{SessionID: &sid}, nil)
	if err != nil || cfg.Revision != 3 || string(cfg.Options) != `[{"id":"mode"},{"id":"model"}]` {
		t.Errorf("getSessionConfig = %+v, %v", cfg, err)
	}
	caps, err := rpc.Call[events.AcpSessionCapabilitiesResponse](t.Context(), h.nc, events.APISubject("default", events.OpGetSessionCapabilities), &events.AcpGetSessionCapabilitiesRequest{SessionID: &sid}, nil)
	if err != nil || string(caps.Capabilities) != `{"loadSession":true}` {
		t.Errorf("getSessionCapabilities = %+v, %v", caps, err)
	}
	info, err := rpc.Call[events.AcpSessionAgentInfoResponse](t.Context(), h.nc, events.APISubject("default", events.OpGetSessionAgentInfo), &events.AcpGetSessionAgentInfoRequest{SessionID: &sid}, nil)
	if err != nil || string(info.AgentInfo) != `{"name":"a","version":"1"}` {
		t.Errorf("getSessionAgentInfo = %+v, %v", info, err)
	}
	nope := "nope"
	if _, err := rpc.Call[events.AcpSessionConfigResponse](t.Context(), h.nc, events.APISubject("default", events.OpGetSessionConfig), &events.AcpGetSessionConfigRequest{SessionID: &nope}, nil); events.AsError(err).Code != events.CodeSessionNotFound {
		t.Errorf("getSessionConfig(nope) = %v, want %s", err, events.CodeSessionNotFound)
	}
}
