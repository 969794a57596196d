package adapterrunner

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the runner's instruments, registered on the injected registry.
type metrics struct {
	adapters        prometheus.Gauge
	createSeconds   prometheus.Histogram
	ioRecords       prometheus.Counter
	ioPublishErrors prometheus.Counter
	protocolErrors  prometheus.Counter
	unexpectedExits prometheus.Counter
	stderrDropped   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		adapters:        f.NewGauge(prometheus.GaugeOpts{Name: "acp_runner_adapters", Help: "Adapter processes hosted now."}),
		createSeconds:   f.NewHistogram(prometheus.HistogramOpts{Name: "acp_runner_create_seconds", Help: "Time to spawn an adapter and open its ACP session.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		ioRecords:       f.NewCounter(prometheus.CounterOpts{Name: "acp_runner_io_records_total", Help: "Records published to ACP_IO."}),
		ioPublishErrors: f.NewCounter(prometheus.CounterOpts{Name: "acp_runner_io_publish_errors_total", Help: "ACP_IO publishes that failed."}),
		protocolErrors:  f.NewCounter(prometheus.CounterOpts{Name: "acp_runner_protocol_errors_total", Help: "Adapter stdout lines that were not ACP."}),
		unexpectedExits: f.NewCounter(prometheus.CounterOpts{Name: "acp_runner_unexpected_exits_total", Help: "Adapters that exited without being asked to."}),
		stderrDropped:   f.NewCounter(prometheus.CounterOpts{Name: "acp_runner_stderr_dropped_bytes_total", Help: "Adapter stderr bytes beyond the forwarding bound."}),
	}
}
