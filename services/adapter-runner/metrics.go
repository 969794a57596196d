package adapterrunner

import (
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"skein.dev/internal/natsmetrics"
)

// Why an adapter process ended: the values of the cause label of
// acp_runner_adapter_exits_total, a closed set.
const (
	exitRequested     = "requested"      // the runner stopped it: asked to, a leftover replaced, a failed open, the runner's shutdown
	exitClean         = "exited"         // it exited on its own with status 0
	exitFailed        = "failed"         // it exited on its own with a non-zero status
	exitSignal        = "signal"         // a signal it did not get from the runner killed it
	exitProtocolError = "protocol_error" // it wrote a line past adapter-runner.max-line-bytes, which ended its connection; then it exited or was stopped
)

var exitCauses = []string{exitRequested, exitClean, exitFailed, exitSignal, exitProtocolError}

// metrics are the runner's instruments, registered on the injected registry.
type metrics struct {
	capacity        int
	adapters        prometheus.Gauge
	freeSlots       prometheus.Gauge
	createSeconds   prometheus.Histogram
	ioRecords       prometheus.Counter
	ioPublishErrors prometheus.Counter
	ioInFlight      prometheus.Gauge
	ioInFlightBytes prometheus.Gauge
	ioRetries       prometheus.Counter
	ioWindowWaits   prometheus.Counter
	ioUnconfirmed   prometheus.Counter
	protocolErrors  prometheus.Counter
	promptRepeats   prometheus.Counter
	fileRefusals    *prometheus.CounterVec // by cause (fileops.go)
	unexpectedExits prometheus.Counter
	exits           *prometheus.CounterVec // by cause
	stderrDropped   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, nc *nats.Conn, capacity int) *metrics {
	natsmetrics.Register(reg, natsmetrics.NewConn(natsmetrics.ServiceAdapterRunner, nc))
	f := promauto.With(reg)
	m := &metrics{
		capacity:        capacity,
		adapters:        f.NewGauge(prometheus.GaugeOpts{Name: "acp_runner_adapters", Help: "Adapter processes hosted now."}),
		freeSlots:       f.NewGauge(prometheus.GaugeOpts{Name: "acp_runner_free_slots", Help: "Adapters this runner can still start: adapter-runner.capacity less the adapters hosted now. At 0 it refuses new sessions (agent_unavailable)."}),
		createSeconds:   f.NewHistogram(prometheus.HistogramOpts{Name: "acp_runner_create_seconds", Help: "Time to spawn an adapter and open its ACP session.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		ioRecords:       f.NewCounter(prometheus.CounterOpts{Name: "acp_runner_io_records_total", Help: "Records ACP_IO acknowledged as stored (a record sent again counts once)."}),
		ioPublishErrors: f.NewCounter(prometheus.CounterOpts{Name: "acp_runner_io_publish_errors_total", Help: "ACP_IO records given up on because the stream or the server refused them for good (too large, say): each leaves a gap in its process's record numbers."}),
		ioInFlight:      f.NewGauge(prometheus.GaugeOpts{Name: "acp_runner_io_in_flight_records", Help: "ACP_IO records handed to NATS and not yet acknowledged as stored, all adapters together; each adapter holds at most adapter-runner.io-window-records."}),
		ioInFlightBytes: f.NewGauge(prometheus.GaugeOpts{Name: "acp_runner_io_in_flight_bytes", Help: "Payload bytes of acp_runner_io_in_flight_records; each adapter holds at most adapter-runner.io-window-bytes (or one larger record)."}),
		ioRetries:       f.NewCounter(prometheus.CounterOpts{Name: "acp_runner_io_retries_total", Help: "ACP_IO records sent again, with the same Nats-Msg-Id, because a copy was not acknowledged (no responders, a timeout, a reconnection, an election)."}),
		ioWindowWaits:   f.NewCounter(prometheus.CounterOpts{Name: "acp_runner_io_window_waits_total", Help: "Times a record waited for room in its adapter's full window, which stops the runner reading that adapter's output until ACP_IO stores what it holds."}),
		ioUnconfirmed:   f.NewCounter(prometheus.CounterOpts{Name: "acp_runner_io_unconfirmed_total", Help: "ACP_IO records of adapters the runner was stopping, sent without waiting for their acknowledgement (nothing waits on a stopped adapter's output)."}),
		protocolErrors:  f.NewCounter(prometheus.CounterOpts{Name: "acp_runner_protocol_errors_total", Help: "Adapter stdout lines that were not ACP."}),
		promptRepeats:   f.NewCounter(prometheus.CounterOpts{Name: "acp_runner_prompt_repeats_total", Help: "Prompt dispatches for a turn whose session/prompt this runner had written already: acknowledged, not written again (a session owner sends a dispatch again when its first went unanswered)."}),
		fileRefusals: f.NewCounterVec(prometheus.CounterOpts{Name: "acp_runner_file_refusals_total",
			Help: "File ops and uploads refused to protect the runner, by cause: not_regular (a FIFO, device or socket in a workspace), busy_session and busy_runner (file ops in flight at adapter-runner.file-ops-per-session or adapter-runner.file-ops), timeout (an op outlasted adapter-runner.file-op-timeout), uploads_session, uploads_principal, uploads_namespace and uploads_runner (uploads in progress at their bound)."},
			[]string{"cause"}),
		unexpectedExits: f.NewCounter(prometheus.CounterOpts{Name: "acp_runner_unexpected_exits_total", Help: "Adapters that exited without being asked to."}),
		exits: f.NewCounterVec(prometheus.CounterOpts{Name: "acp_runner_adapter_exits_total",
			Help: "Adapter processes reaped, by cause: requested (the runner stopped it), exited (on its own, status 0), failed (on its own, non-zero status), signal (killed by a signal the runner did not send), protocol_error (a line too long for adapter-runner.max-line-bytes had ended its connection, whether it then exited or was stopped)."},
			[]string{"cause"}),
		stderrDropped: f.NewCounter(prometheus.CounterOpts{Name: "acp_runner_stderr_dropped_bytes_total", Help: "Adapter stderr bytes beyond the forwarding bound."}),
	}
	f.NewGauge(prometheus.GaugeOpts{Name: "acp_runner_capacity", Help: "Adapters this runner hosts at once (adapter-runner.capacity)."}).Set(float64(capacity))
	for _, c := range exitCauses {
		m.exits.WithLabelValues(c)
	}
	for _, c := range refusalCauses {
		m.fileRefusals.WithLabelValues(c)
	}
	m.hosting(0)
	return m
}

// hosting sets the adapter gauges to n adapters hosted.
func (m *metrics) hosting(n int) {
	m.adapters.Set(float64(n))
	m.freeSlots.Set(float64(max(m.capacity-n, 0)))
}
