package notify

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"skein.dev/pkg/events/webhook"
)

// Values of acp_notify_attempts_failed_total's result label.
const (
	resultRetried = "retried"  // it will be tried again
	resultGivenUp = "given_up" // past notify.retry-for: no attempt follows
)

type metrics struct {
	events    *prometheus.CounterVec
	delivered prometheus.Counter
	failed    *prometheus.CounterVec
	attempt   prometheus.Histogram
	latency   prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		events: f.NewCounterVec(prometheus.CounterOpts{
			Name: "acp_notify_events_total", Help: "Notifications derived from the session logs and stored in ACP_NOTIFY, by type.",
		}, []string{"type"}),
		delivered: f.NewCounter(prometheus.CounterOpts{
			Name: "acp_notify_deliveries_total", Help: "Webhook notifications a receiver acknowledged with a 2xx answer.",
		}),
		failed: f.NewCounterVec(prometheus.CounterOpts{
			Name: "acp_notify_attempts_failed_total", Help: "Webhook attempts that failed (no answer, or not 2xx), by what follows: retried, or given_up past notify.retry-for.",
		}, []string{"result"}),
		attempt: f.NewHistogram(prometheus.HistogramOpts{
			Name: "acp_notify_attempt_seconds", Help: "Duration of one webhook attempt, from the request to the receiver's answer or the failure.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		latency: f.NewHistogram(prometheus.HistogramOpts{
			Name: "acp_notify_delivery_latency_seconds", Help: "From the log record a notification comes from being stored to the receiver's 2xx answer, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 24),
		}),
	}
	for _, t := range webhook.Types {
		m.events.WithLabelValues(t)
	}
	m.failed.WithLabelValues(resultRetried)
	m.failed.WithLabelValues(resultGivenUp)
	return m
}
