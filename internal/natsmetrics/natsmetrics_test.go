package natsmetrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"skein.dev/internal/natsmetrics"
	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events/eventlog"
)

// gather returns every series of reg as name → label values joined → value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		series := map[string]float64{}
		for _, m := range mf.GetMetric() {
			var key strings.Builder
			for _, l := range m.GetLabel() {
				key.WriteString(l.GetName() + "=" + l.GetValue() + ",")
			}
			series[key.String()] = value(m)
		}
		out[mf.GetName()] = series
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return 0
}

func TestConn(t *testing.T) {
	srv := natstest.Run(t)
	gw := natstest.Connect(t, srv)
	sess := natstest.Connect(t, srv)
	reg := prometheus.NewRegistry()
	// Two services on one registry, as in skein dev: one series each.
	natsmetrics.Register(reg, natsmetrics.NewConn(natsmetrics.ServiceGateway, gw))
	natsmetrics.Register(reg, natsmetrics.NewConn(natsmetrics.ServiceSession, sess))
	natsmetrics.Register(nil, natsmetrics.NewConn(natsmetrics.ServiceHistory, sess)) // registers nothing

	if err := gw.Publish("x", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := gw.Flush(); err != nil {
		t.Fatal(err)
	}
	got := gather(t, reg)
	for _, svc := range []string{natsmetrics.ServiceGateway, natsmetrics.ServiceSession} {
		if v := got["acp_nats_connected"]["service="+svc+","]; v != 1 {
			t.Errorf("acp_nats_connected{service=%s} = %v, want 1", svc, v)
		}
	}
	if len(got["acp_nats_connected"]) != 2 {
		t.Errorf("acp_nats_connected has %d series, want 2", len(got["acp_nats_connected"]))
	}
	if v := got["acp_nats_out_msgs_total"]["service=gateway,"]; v < 1 {
		t.Errorf("gateway out msgs %v, want at least 1", v)
	}
	if _, ok := got["acp_nats_reconnects_total"]["service=session,"]; !ok {
		t.Error("no acp_nats_reconnects_total for the session service")
	}

	sess.Close()
	if v := gather(t, reg)["acp_nats_connected"]["service=session,"]; v != 0 {
		t.Errorf("a closed connection reports connected %v, want 0", v)
	}
}

func TestStreams(t *testing.T) {
	srv := natstest.Run(t)
	nc := natstest.Connect(t, srv)
	reg := prometheus.NewRegistry()
	c, err := natsmetrics.NewStreams(nc, 0)
	if err != nil {
		t.Fatal(err)
	}
	natsmetrics.Register(reg, c)

	// Before provisioning no stream exists: nothing but the errors.
	got := gather(t, reg)
	if n := got["acp_stream_info_errors_total"][""]; n != float64(len(natsmetrics.StreamNames())) {
		t.Errorf("info errors before provisioning = %v, want %d", n, len(natsmetrics.StreamNames()))
	}
	if len(got["acp_stream_leader_present"]) != 0 {
		t.Errorf("leader series for streams that do not exist: %v", got["acp_stream_leader_present"])
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := eventlog.Provision(t.Context(), js, eventlog.Options{Replicas: 1}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), "acp.log.default.s1.ev", []byte("x")); err != nil {
		t.Fatal(err)
	}
	got = gather(t, reg)
	for _, name := range natsmetrics.StreamNames() {
		s := "stream=" + name + ","
		if v := got["acp_stream_leader_present"][s]; v != 1 {
			t.Errorf("%s: leader present %v, want 1", name, v)
		}
		for _, state := range []string{natsmetrics.ReplicaCurrent, natsmetrics.ReplicaLagging, natsmetrics.ReplicaOffline} {
			// Single server: no followers.
			if v, ok := got["acp_stream_replicas"]["state="+state+","+s]; !ok || v != 0 {
				t.Errorf("%s: replicas{state=%s} = %v (present %v), want 0", name, state, v, ok)
			}
		}
		if _, ok := got["acp_stream_bytes"][s]; !ok {
			t.Errorf("%s: no acp_stream_bytes", name)
		}
	}
	if v := got["acp_stream_messages"]["stream=ACP_LOG,"]; v != 1 {
		t.Errorf("ACP_LOG messages %v, want 1", v)
	}

	// A server that does not answer: every stream's leader is reported
	// missing, and each request counted as an error.
	before := got["acp_stream_info_errors_total"][""]
	srv.Shutdown()
	srv.WaitForShutdown()
	c2, err := natsmetrics.NewStreams(nc, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	reg2 := prometheus.NewRegistry()
	natsmetrics.Register(reg2, c2)
	got = gather(t, reg2)
	for _, name := range natsmetrics.StreamNames() {
		if v, ok := got["acp_stream_leader_present"]["stream="+name+","]; !ok || v != 0 {
			t.Errorf("%s without a server: leader present %v (present %v), want 0", name, v, ok)
		}
	}
	if n := got["acp_stream_info_errors_total"][""]; n != float64(len(natsmetrics.StreamNames())) {
		t.Errorf("info errors without a server = %v, want %d (first collector had %v)", n, len(natsmetrics.StreamNames()), before)
	}
	if nc.Status() == nats.CONNECTED {
		t.Error("still connected to a server that shut down")
	}
}

// On an R3 cluster the streams' followers are current and every stream has
// a leader; with a node shut down, each stream's leader reports one
// follower offline: what the node-down alert reads.
func TestStreamsCluster(t *testing.T) {
	nodes := natstest.RunCluster(t, 3)
	nc := natstest.Connect(t, nodes[0])
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := eventlog.Provision(t.Context(), js, eventlog.Options{Replicas: 3}, false); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c, err := natsmetrics.NewStreams(nc, 0)
	if err != nil {
		t.Fatal(err)
	}
	natsmetrics.Register(reg, c)

	// every reports whether every stream's series has value v for state
	// (and a leader), and the last scrape.
	var got map[string]map[string]float64
	every := func(state string, v float64) bool {
		got = gather(t, reg)
		for _, name := range natsmetrics.StreamNames() {
			if got["acp_stream_leader_present"]["stream="+name+","] != 1 ||
				got["acp_stream_replicas"]["state="+state+",stream="+name+","] != v {
				return false
			}
		}
		return true
	}
	if err := testutil.Poll(t.Context(), "every stream's two followers current", func() (bool, error) { return every(natsmetrics.ReplicaCurrent, 2), nil }); err != nil {
		t.Fatalf("%v: %v", err, got["acp_stream_replicas"])
	}

	nodes[2].Shutdown()
	nodes[2].WaitForShutdown()
	if err := testutil.Poll(t.Context(), "every stream's leader to report a follower offline", func() (bool, error) { return every(natsmetrics.ReplicaOffline, 1), nil }); err != nil {
		t.Fatalf("%v: replicas %v, leaders %v", err, got["acp_stream_replicas"], got["acp_stream_leader_present"])
	}
}
