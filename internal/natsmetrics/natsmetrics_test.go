package natsmetrics_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"skein.dev/internal/natsmetrics"
	"skein.dev/internal/natstest"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/events/streams"
)

// gather scrapes reg once: the stream collector asks the server for each
// scrape, so a test reads all it checks from one.
func gather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// series is the value of the series of name with labels in mfs, and
// whether there is one.
func series(mfs []*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	return testutil.SeriesIn(mfs, name, labels...)
}

// family is the family name in mfs, for a failure's message.
func family(mfs []*dto.MetricFamily, name string) *dto.MetricFamily {
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

// val is series without the presence.
func val(mfs []*dto.MetricFamily, name string, labels ...string) float64 {
	v, _ := series(mfs, name, labels...)
	return v
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
		if v := val(got, "acp_nats_connected", "service", svc); v != 1 {
			t.Errorf("acp_nats_connected{service=%s} = %v, want 1", svc, v)
		}
	}
	if n, err := promtest.GatherAndCount(reg, "acp_nats_connected"); n != 2 || err != nil {
		t.Errorf("acp_nats_connected has %d series (%v), want 2", n, err)
	}
	if v := val(got, "acp_nats_out_msgs_total", "service", "gateway"); v < 1 {
		t.Errorf("gateway out msgs %v, want at least 1", v)
	}
	if _, ok := series(got, "acp_nats_reconnects_total", "service", "session"); !ok {
		t.Error("no acp_nats_reconnects_total for the session service")
	}

	sess.Close()
	if v := val(gather(t, reg), "acp_nats_connected", "service", "session"); v != 0 {
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
	if n := val(got, "acp_stream_info_errors_total"); n != float64(len(natsmetrics.StreamNames())) {
		t.Errorf("info errors before provisioning = %v, want %d", n, len(natsmetrics.StreamNames()))
	}
	if _, ok := series(got, "acp_stream_leader_present"); ok {
		t.Error("leader series for streams that do not exist")
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(t.Context(), js, streams.Options{Replicas: 1}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), "acp.log.default.s1.ev", []byte("x")); err != nil {
		t.Fatal(err)
	}
	got = gather(t, reg)
	for _, name := range natsmetrics.StreamNames() {
		if v := val(got, "acp_stream_leader_present", "stream", name); v != 1 {
			t.Errorf("%s: leader present %v, want 1", name, v)
		}
		for _, state := range []string{natsmetrics.ReplicaCurrent, natsmetrics.ReplicaLagging, natsmetrics.ReplicaOffline} {
			// Single server: no followers.
			if v, ok := series(got, "acp_stream_replicas", "state", state, "stream", name); !ok || v != 0 {
				t.Errorf("%s: replicas{state=%s} = %v (present %v), want 0", name, state, v, ok)
			}
		}
		if _, ok := series(got, "acp_stream_bytes", "stream", name); !ok {
			t.Errorf("%s: no acp_stream_bytes", name)
		}
	}
	if v := val(got, "acp_stream_messages", "stream", "ACP_LOG"); v != 1 {
		t.Errorf("ACP_LOG messages %v, want 1", v)
	}

	// A server that does not answer: every stream's leader is reported
	// missing, and each request counted as an error.
	before := val(got, "acp_stream_info_errors_total")
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
		if v, ok := series(got, "acp_stream_leader_present", "stream", name); !ok || v != 0 {
			t.Errorf("%s without a server: leader present %v (present %v), want 0", name, v, ok)
		}
	}
	// Every stream's info, and the account's.
	if n := val(got, "acp_stream_info_errors_total"); n != float64(len(natsmetrics.StreamNames())+1) {
		t.Errorf("info errors without a server = %v, want %d (first collector had %v)", n, len(natsmetrics.StreamNames())+1, before)
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
	if err := streams.Provision(t.Context(), js, streams.Options{Replicas: 3}, false); err != nil {
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
	var got []*dto.MetricFamily
	every := func(state string, v float64) bool {
		got = gather(t, reg)
		for _, name := range natsmetrics.StreamNames() {
			if val(got, "acp_stream_leader_present", "stream", name) != 1 ||
				val(got, "acp_stream_replicas", "state", state, "stream", name) != v {
				return false
			}
		}
		return true
	}
	if err := testutil.Poll(t.Context(), "every stream's two followers current", func() (bool, error) { return every(natsmetrics.ReplicaCurrent, 2), nil }); err != nil {
		t.Fatalf("%v: %v", err, family(got, "acp_stream_replicas"))
	}

	nodes[2].Shutdown()
	nodes[2].WaitForShutdown()
	if err := testutil.Poll(t.Context(), "every stream's leader to report a follower offline", func() (bool, error) { return every(natsmetrics.ReplicaOffline, 1), nil }); err != nil {
		t.Fatalf("%v: replicas %v, leaders %v", err, family(got, "acp_stream_replicas"), family(got, "acp_stream_leader_present"))
	}
}
