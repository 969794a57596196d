package gateway

import (
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"skein.dev/internal/natsmetrics"
	"skein.dev/pkg/events/eventjson"
)

// Reasons an event stream ends: the values of the reason label of
// acp_gateway_sse_stream_ends_total.
const (
	endClientGone = "client_gone" // the client disconnected or a write to it failed
	endOverflow   = "overflow"    // the client fell further behind than StreamBuffer
	endShutdown   = "shutdown"    // the gateway is stopping
	endError      = "error"       // a history read or decode failed
	endRevoked    = "revoked"     // the caller's token no longer grants the stream
)

// metrics holds every instrument of the gateway. Labels come from closed
// sets: route patterns, status codes, durability, end reasons; never
// session IDs.
type metrics struct {
	requests       *prometheus.CounterVec
	requestSeconds *prometheus.HistogramVec // by route
	streams        prometheus.Gauge
	streamEvents   *prometheus.CounterVec
	// durableEvents and ephemeralEvents are streamEvents' two series,
	// looked up once: every viewer counts every event it writes.
	durableEvents   prometheus.Counter
	ephemeralEvents prometheus.Counter
	streamEnds      *prometheus.CounterVec
	gapFills        prometheus.Counter
	overflows       prometheus.Counter

	liveSubscriptions prometheus.Gauge
	unready           *prometheus.CounterVec // by reason (procload.go)

	acpConns *prometheus.GaugeVec   // by transport (acp.go)
	acpEnds  *prometheus.CounterVec // by reason
}

// newMetrics builds the instruments and registers them with reg. A nil reg
// registers nothing, which suits tests that do not look.
func newMetrics(reg prometheus.Registerer, nc *nats.Conn) *metrics {
	natsmetrics.Register(reg, natsmetrics.NewConn(natsmetrics.ServiceGateway, nc))
	f := promauto.With(reg)
	m := &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "acp_gateway_requests_total",
			Help: "HTTP requests by route pattern and response status code.",
		}, []string{"route", "code"}),
		requestSeconds: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "acp_gateway_request_seconds",
			Help:    "HTTP request duration by route pattern, from the request's routing to its handler's return: for an event stream (SSE) or a watch, as long as it was held open.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"route"}),
		streams: f.NewGauge(prometheus.GaugeOpts{
			Name: "acp_gateway_sse_streams",
			Help: "Event streams (SSE) currently open.",
		}),
		streamEvents: f.NewCounterVec(prometheus.CounterOpts{
			Name: "acp_gateway_sse_events_total",
			Help: "Events written to event streams, by durability.",
		}, []string{"durability"}),
		streamEnds: f.NewCounterVec(prometheus.CounterOpts{
			Name: "acp_gateway_sse_stream_ends_total",
			Help: "Event streams ended, by reason.",
		}, []string{"reason"}),
		gapFills: f.NewCounter(prometheus.CounterOpts{
			Name: "acp_gateway_sse_gap_fills_total",
			Help: "Catch-ups because a live tail skipped an event: a session feed's direct gets (once for all its viewers) or one event stream's history read.",
		}),
		overflows: f.NewCounter(prometheus.CounterOpts{
			Name: "acp_gateway_sse_overflows_total",
			Help: "Event streams whose live buffer overflowed because the client was too slow.",
		}),
		liveSubscriptions: f.NewGauge(prometheus.GaugeOpts{
			Name: "acp_gateway_live_subscriptions",
			Help: "NATS subscriptions the gateway holds for event streams and watches: two per followed session (its tail and its deltas), however many viewers and watches follow it.",
		}),
	}
	m.unready = f.NewCounterVec(prometheus.CounterOpts{
		Name: "acp_gateway_unready_total",
		Help: "/readyz answers of 503, by reason: stopping, nats_disconnected, descriptors and threads (the process holds gateway.ready-max-load percent of RLIMIT_NOFILE, or of its thread limit).",
	}, []string{"reason"})
	for _, r := range unreadyReasons {
		m.unready.WithLabelValues(r)
	}
	m.acpConns = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "acp_gateway_acp_connections",
		Help: "ACP connections of the /acp endpoint open now, by transport: http (Streamable HTTP) or websocket.",
	}, []string{"transport"})
	m.acpEnds = f.NewCounterVec(prometheus.CounterOpts{
		Name: "acp_gateway_acp_connection_ends_total",
		Help: "ACP connections of the /acp endpoint ended, by reason: closed, idle, shutdown, overflow, revoked, error.",
	}, []string{"reason"})
	for _, t := range []string{acpTransportHTTP, acpTransportWebSocket} {
		m.acpConns.WithLabelValues(t)
	}
	m.durableEvents = m.streamEvents.WithLabelValues(eventjson.DurabilityDurable)
	m.ephemeralEvents = m.streamEvents.WithLabelValues(eventjson.DurabilityEphemeral)
	return m
}
