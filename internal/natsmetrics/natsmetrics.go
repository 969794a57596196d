// Package natsmetrics exports what every Skein service should say about its
// NATS side: the state of its connection (Conn) and, from one service of a
// deployment, the health of the JetStream streams Skein keeps (Streams).
//
// Both are prometheus.Collectors read at scrape time, so nothing runs
// between scrapes. Their labels are closed sets: the service names of
// cmd/skein's targets and the stream names of package events.
package natsmetrics

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/pkg/events"
)

// Services: the values of the service label, one per Skein service. They are
// cmd/skein's target names.
const (
	ServiceGateway       = "gateway"
	ServiceSession       = "session"
	ServiceAdapterRunner = "adapter-runner"
	ServiceHistory       = "history"
	ServiceNotify        = "notify"
)

// Register registers c on reg; a nil reg registers nothing (the services'
// convention for tests that do not look).
func Register(reg prometheus.Registerer, c prometheus.Collector) {
	if reg != nil {
		reg.MustRegister(c)
	}
}

// Conn exports the state of one service's NATS connection. Every series
// carries the service as a constant label, so the services of one process
// (skein dev), each on a connection of its own, register one Conn each.
type Conn struct {
	nc         *nats.Conn
	connected  *prometheus.Desc
	reconnects *prometheus.Desc
	inMsgs     *prometheus.Desc
	outMsgs    *prometheus.Desc
	inBytes    *prometheus.Desc
	outBytes   *prometheus.Desc
}

// NewConn returns the collector of service's connection nc.
func NewConn(service string, nc *nats.Conn) *Conn {
	l := prometheus.Labels{"service": service}
	return &Conn{
		nc:         nc,
		connected:  prometheus.NewDesc("acp_nats_connected", "1 while the service's NATS connection is connected (nats.Conn.Status() is CONNECTED), else 0: reconnecting, draining or closed.", nil, l),
		reconnects: prometheus.NewDesc("acp_nats_reconnects_total", "Times the service's NATS connection reconnected (nats.Conn.Stats().Reconnects).", nil, l),
		inMsgs:     prometheus.NewDesc("acp_nats_in_msgs_total", "Messages the service's NATS connection received.", nil, l),
		outMsgs:    prometheus.NewDesc("acp_nats_out_msgs_total", "Messages the service's NATS connection sent.", nil, l),
		inBytes:    prometheus.NewDesc("acp_nats_in_bytes_total", "Payload bytes the service's NATS connection received.", nil, l),
		outBytes:   prometheus.NewDesc("acp_nats_out_bytes_total", "Payload bytes the service's NATS connection sent.", nil, l),
	}
}

// Describe implements prometheus.Collector.
func (c *Conn) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.connected, c.reconnects, c.inMsgs, c.outMsgs, c.inBytes, c.outBytes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Conn) Collect(ch chan<- prometheus.Metric) {
	connected := 0.0
	if c.nc.Status() == nats.CONNECTED {
		connected = 1
	}
	st := c.nc.Stats()
	ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, connected)
	ch <- prometheus.MustNewConstMetric(c.reconnects, prometheus.CounterValue, float64(st.Reconnects))
	ch <- prometheus.MustNewConstMetric(c.inMsgs, prometheus.CounterValue, float64(st.InMsgs))
	ch <- prometheus.MustNewConstMetric(c.outMsgs, prometheus.CounterValue, float64(st.OutMsgs))
	ch <- prometheus.MustNewConstMetric(c.inBytes, prometheus.CounterValue, float64(st.InBytes))
	ch <- prometheus.MustNewConstMetric(c.outBytes, prometheus.CounterValue, float64(st.OutBytes))
}

// StreamNames are the streams Streams reports on: the log, adapter output,
// and the streams behind the four buckets. A closed set: the values of the
// stream label.
func StreamNames() []string {
	return []string{
		events.StreamLog,
		events.StreamIO,
		"KV_" + events.BucketSessions,
		"KV_" + events.BucketOwners,
		"KV_" + events.BucketRunners,
		"KV_" + events.BucketBudgets,
	}
}

// Replica states: the values of acp_stream_replicas' state label.
const (
	ReplicaCurrent = "current" // a follower the leader sees as current
	ReplicaLagging = "lagging" // a follower online but not current
	ReplicaOffline = "offline" // a follower the leader cannot reach
)

// DefaultStreamTimeout bounds one scrape's stream info requests, all of them
// together.
const DefaultStreamTimeout = 2 * time.Second

// Streams exports, at each scrape, JetStream's stream info for StreamNames:
// size, and on a cluster the replicas' state as the stream's leader sees
// it. One service of a deployment registers it (the history service does);
// every replica of that service then reports the same streams, so alerts
// aggregate with max by (stream).
type Streams struct {
	js      jetstream.JetStream
	timeout time.Duration

	messages, bytes, replicas, lagMax, leader, consumers *prometheus.Desc
	storeBytes, storeLimit                               *prometheus.Desc
	errors                                               prometheus.Counter
}

// NewStreams returns the collector for the streams of nc's account. Each
// scrape waits at most timeout (DefaultStreamTimeout when 0) for the
// stream infos; a stream whose info did not come is left out of that scrape
// and counted in acp_stream_info_errors_total.
func NewStreams(nc *nats.Conn, timeout time.Duration) (*Streams, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = DefaultStreamTimeout
	}
	s := []string{"stream"}
	return &Streams{
		js:         js,
		timeout:    timeout,
		messages:   prometheus.NewDesc("acp_stream_messages", "Messages stored in the stream (JetStream stream info State.Msgs), read at scrape.", s, nil),
		bytes:      prometheus.NewDesc("acp_stream_bytes", "Bytes stored in the stream (State.Bytes), read at scrape.", s, nil),
		consumers:  prometheus.NewDesc("acp_stream_consumers", "Consumers of the stream (State.Consumers), read at scrape.", s, nil),
		replicas:   prometheus.NewDesc("acp_stream_replicas", "The stream's followers by state as its leader reports them (Cluster.Replicas: current, lagging = online but not current, offline). All 0 on a single server, which has no followers.", []string{"stream", "state"}, nil),
		lagMax:     prometheus.NewDesc("acp_stream_replica_lag_max", "The largest follower lag of the stream, in operations behind the leader (max of Cluster.Replicas[].Lag); 0 without followers.", s, nil),
		leader:     prometheus.NewDesc("acp_stream_leader_present", "1 if the stream has a leader (its info names one, or a single server without cluster info answered), else 0: the info names no leader, or did not come within the scrape's timeout (a replicated stream without a leader does not answer). Absent for a stream that does not exist.", s, nil),
		storeBytes: prometheus.NewDesc("acp_jetstream_store_bytes", "The file store the account's streams use (JetStream account info Store), read at scrape: with acp_jetstream_store_limit_bytes, how near the store is to refusing writes (storage_full).", nil, nil),
		storeLimit: prometheus.NewDesc("acp_jetstream_store_limit_bytes", "The account's file store limit (account info Limits.MaxStore), read at scrape; 0 when the account has none (the server's max_file_store then bounds it, which /jsz shows).", nil, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "acp_stream_info_errors_total",
			Help: "Stream (or account) info requests of a scrape that failed or timed out: that scrape then has no size, consumer or replica series for the stream (and acp_stream_leader_present 0 unless the stream does not exist).",
		}),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *Streams) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.messages, c.bytes, c.consumers, c.replicas, c.lagMax, c.leader, c.storeBytes, c.storeLimit} {
		ch <- d
	}
	c.errors.Describe(ch)
}

// Collect implements prometheus.Collector. It asks for every stream's info
// at once and waits for all of them, bounded by the collector's timeout.
func (c *Streams) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	names := StreamNames()
	infos := make([]*jetstream.StreamInfo, len(names))
	unanswered := make([]bool, len(names))
	var wg sync.WaitGroup
	var account *jetstream.AccountInfo
	wg.Go(func() {
		info, err := c.js.AccountInfo(ctx)
		if err != nil {
			c.errors.Inc()
			return
		}
		account = info
	})
	for i, name := range names {
		wg.Go(func() {
			st, err := c.js.Stream(ctx, name) // one stream info request
			if err != nil {
				c.errors.Inc()
				unanswered[i] = !errors.Is(err, jetstream.ErrStreamNotFound)
				return
			}
			infos[i] = st.CachedInfo()
		})
	}
	wg.Wait()
	if account != nil {
		ch <- prometheus.MustNewConstMetric(c.storeBytes, prometheus.GaugeValue, float64(account.Store))
		ch <- prometheus.MustNewConstMetric(c.storeLimit, prometheus.GaugeValue, float64(max(account.Limits.MaxStore, 0)))
	}
	for i, info := range infos {
		name := names[i]
		if info == nil {
			if unanswered[i] {
				// A replicated stream without a leader does not answer:
				// nobody to ask is as good as no leader.
				ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, 0, name)
			}
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.messages, prometheus.GaugeValue, float64(info.State.Msgs), name)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(info.State.Bytes), name)
		ch <- prometheus.MustNewConstMetric(c.consumers, prometheus.GaugeValue, float64(info.State.Consumers), name)
		var current, lagging, offline, lag float64
		leader := 1.0
		if cl := info.Cluster; cl != nil {
			if cl.Leader == "" {
				leader = 0
			}
			for _, r := range cl.Replicas {
				switch {
				case r.Offline:
					offline++
				case r.Current:
					current++
				default:
					lagging++
				}
				lag = max(lag, float64(r.Lag))
			}
		}
		ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, current, name, ReplicaCurrent)
		ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, lagging, name, ReplicaLagging)
		ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, offline, name, ReplicaOffline)
		ch <- prometheus.MustNewConstMetric(c.lagMax, prometheus.GaugeValue, lag, name)
		ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, leader, name)
	}
	c.errors.Collect(ch)
}
