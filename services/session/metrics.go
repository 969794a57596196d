package session

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the session service's instruments.
type metrics struct {
	sessionsLoaded prometheus.Gauge
	turnsStarted   prometheus.Counter
	dispatches     prometheus.Counter
	turnsFinished  *prometheus.CounterVec // by outcome
	appends        *prometheus.CounterVec // by result
	appendSeconds  prometheus.Histogram
	appendRecords  prometheus.Counter
	liveDeltas     prometheus.Counter
	attachSeconds  *prometheus.HistogramVec // by tier
	ioRecords      *prometheus.CounterVec   // by record
	ioGapRecords   prometheus.Counter
	ioLost         prometheus.Counter
	reclaims       *prometheus.CounterVec // by reason
	takeovers      prometheus.Counter
	leases         *prometheus.CounterVec // by event
	forwards       prometheus.Counter
	fences         prometheus.Counter
	// The errors that must not vanish: each is logged where it happens and
	// counted here.
	ioRejected        *prometheus.CounterVec // ACP_IO records not applied, by reason
	livePublishErrors prometheus.Counter
	lostRecords       *prometheus.CounterVec // records that could not be appended, by record
	claimsSkipped     *prometheus.CounterVec // lease claims that did not load the session, by reason
	projectionSkips   *prometheus.CounterVec // projection writes refused, by reason
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		sessionsLoaded: f.NewGauge(prometheus.GaugeOpts{Name: "acp_session_sessions_loaded", Help: "Sessions held in memory by this replica."}),
		turnsStarted:   f.NewCounter(prometheus.CounterOpts{Name: "acp_session_turns_started_total", Help: "Prompts accepted."}),
		dispatches:     f.NewCounter(prometheus.CounterOpts{Name: "acp_session_prompt_dispatches_total", Help: "session/prompt requests sent to adapters."}),
		turnsFinished:  f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_turns_finished_total", Help: "Turns finished, by outcome."}, []string{"outcome"}),
		appends:        f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_appends_total", Help: "Log appends, by result."}, []string{"result"}),
		appendSeconds:  f.NewHistogram(prometheus.HistogramOpts{Name: "acp_session_append_seconds", Help: "Latency of one log append (one record or one atomic batch).", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14)}),
		appendRecords:  f.NewCounter(prometheus.CounterOpts{Name: "acp_session_append_records_total", Help: "Records appended to session logs."}),
		liveDeltas:     f.NewCounter(prometheus.CounterOpts{Name: "acp_session_live_deltas_total", Help: "Ephemeral deltas published on acp.live."}),
		attachSeconds:  f.NewHistogramVec(prometheus.HistogramOpts{Name: "acp_session_attach_seconds", Help: "Time to attach an adapter, by tier.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{"tier"}),
		ioRecords:      f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_io_records_total", Help: "ACP_IO records applied, by record."}, []string{"record"}),
		reclaims:       f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_reclaims_total", Help: "Adapters unloaded by idle reclaim, by reason."}, []string{"reason"}),
		takeovers:      f.NewCounter(prometheus.CounterOpts{Name: "acp_session_takeovers_total", Help: "Open turns continued by a new owner whose adapter was still working on them."}),
		leases:         f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_owner_leases_total", Help: "Owner lease events: acquired, held_elsewhere, renewed, lost, evicted."}, []string{"event"}),
		forwards:       f.NewCounter(prometheus.CounterOpts{Name: "acp_session_forwarded_requests_total", Help: "Requests passed on to the replica owning their session."}),
		fences:         f.NewCounter(prometheus.CounterOpts{Name: "acp_session_owner_fences_total", Help: "OwnerChanged records appended on taking a session over."}),
		ioGapRecords:   f.NewCounter(prometheus.CounterOpts{Name: "acp_session_io_gap_records_total", Help: "ACP_IO records read from the stream to fill a gap in the live tail."}),
		ioLost:         f.NewCounter(prometheus.CounterOpts{Name: "acp_session_io_lost_records_total", Help: "Runner records ACP_IO never stored: gaps in an adapter process's record numbers."}),

		ioRejected:        f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_io_rejected_total", Help: "ACP_IO records not applied, by reason (undecodable, unexpected, malformed_update, malformed_permission)."}, []string{"reason"}),
		livePublishErrors: f.NewCounter(prometheus.CounterOpts{Name: "acp_session_live_publish_errors_total", Help: "Live events (deltas, stderr) that could not be published."}),
		lostRecords:       f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_unrecorded_total", Help: "Records the service could not append, by record (the log is left for the next owner to reconcile)."}, []string{"record"}),
		claimsSkipped:     f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_claims_skipped_total", Help: "Claims that did not load their session, by reason (idle, owned, unreadable, failed)."}, []string{"reason"}),
		projectionSkips:   f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_projection_skips_total", Help: "ACP_SESSIONS projection writes not made, by reason (not_owner, deleted, newer, failed)."}, []string{"reason"}),
	}
}
