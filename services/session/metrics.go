package session

import (
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"skein.dev/internal/natsmetrics"
	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
)

// Closed label sets. Each vec is given its series at construction, so a
// dashboard or an alert sees a zero rather than nothing before the first
// event.
var (
	outcomes = []string{events.OutcomeCompleted, events.OutcomeFailed, events.OutcomeCancelled, events.OutcomeBudgetExhausted}
	// stopReasons are ACP's stop reasons, stopReasonNone for a turn that
	// ended without one (failed, or cancelled before the agent answered)
	// and stopReasonOther for a value ACP does not define.
	stopReasons = []string{acp.StopReasonEndTurn, acp.StopReasonMaxTokens, acp.StopReasonMaxTurnRequests,
		acp.StopReasonRefusal, acp.StopReasonCancelled, stopReasonNone, stopReasonOther}
	tiers         = []string{events.TierNew, events.TierResume, events.TierLoad, events.TierFallback}
	restoreTiers  = []string{events.TierResume, events.TierLoad, events.TierFallback}
	leaseEvents   = []string{"acquired", "held_elsewhere", "renewed", leaseRenewFailed, "lost", "evicted"}
	permEnds      = []string{permAnswered, permTerminal}
	appendResults = []string{"ok", string(events.CodeWriteConflict)}
	// ioRejectReasons and unrecordedRecords are every value the code
	// counts acp_session_io_rejected_total and acp_session_unrecorded_total
	// with.
	ioRejectReasons   = []string{"undecodable", "unexpected", "malformed_update", "malformed_permission", "reserved_kind", "foreign_runner"}
	unrecordedRecords = []string{events.RecordAgentExited, "AcpDurablePermissionResponse", events.RecordTitleChanged, events.RecordAdapterLimitHit, events.RecordBudgetChanged, recordDailySpend}
)

const (
	// leaseRenewFailed counts renewals that failed for a reason that
	// passes (renewLeases tries them again within a second).
	leaseRenewFailed = "renew_failed"

	stopReasonNone  = "none"
	stopReasonOther = "other"

	permAnswered = "answered" // respondPermission chose an option
	permTerminal = "terminal" // a cancel, the turn's end, the adapter's exit or the session's deletion ended it
)

// stopReasonLabel maps a turn's stop reason onto the closed set.
func stopReasonLabel(r string) string {
	switch r {
	case "":
		return stopReasonNone
	case acp.StopReasonEndTurn, acp.StopReasonMaxTokens, acp.StopReasonMaxTurnRequests, acp.StopReasonRefusal, acp.StopReasonCancelled:
		return r
	}
	return stopReasonOther
}

// turnBuckets span a turn's figures: a dispatch of a millisecond to a
// turn of tools and approvals lasting most of an hour.
var turnBuckets = prometheus.ExponentialBuckets(0.001, 2, 22)

// metrics are the session service's instruments.
type metrics struct {
	sessionsLoaded prometheus.Gauge
	turnsStarted   prometheus.Counter
	dispatches     prometheus.Counter
	// dispatchConfirms counts dispatches that got no answer, by how
	// confirmDelivery settled them.
	dispatchConfirms *prometheus.CounterVec
	turnsFinished    *prometheus.CounterVec // by outcome
	appends          *prometheus.CounterVec // by result
	appendSeconds    prometheus.Histogram
	appendRecords    prometheus.Counter
	liveDeltas       prometheus.Counter
	attachSeconds    *prometheus.HistogramVec // by tier
	ioRecords        *prometheus.CounterVec   // by record
	ioGapRecords     prometheus.Counter
	ioLost           prometheus.Counter
	ioDuplicates     prometheus.Counter
	ioHeld           prometheus.Counter
	ioTailMisses     prometheus.Counter
	reclaims         *prometheus.CounterVec // by reason
	takeovers        prometheus.Counter
	stalls           prometheus.Counter     // turns stalled (stall.go)
	stalledTurns     prometheus.Gauge       // turns stalled now, of this replica's
	asksExpired      *prometheus.CounterVec // requests Skein answered, by kind (asktimeout.go)
	budgetExhausted  *prometheus.CounterVec // turns ended and prompts refused at a spending cap, by cap and event (budget.go)
	budgetForeign    prometheus.Counter     // costs not counted: in another currency than the session's spend
	// The prompt queue (queue.go).
	queued               prometheus.Counter
	dequeued             *prometheus.CounterVec // by reason
	queueDispatchSeconds prometheus.Histogram
	leases               *prometheus.CounterVec // by event
	forwards             prometheus.Counter
	fences               prometheus.Counter
	// The errors that must not vanish: each is logged where it happens and
	// counted here.
	ioRejected        *prometheus.CounterVec // ACP_IO records not applied, by reason
	livePublishErrors prometheus.Counter
	heldEnds          prometheus.Gauge
	lostRecords       *prometheus.CounterVec // records that could not be appended, by record
	claimsSkipped     *prometheus.CounterVec // lease claims that did not load the session, by reason
	projectionSkips   *prometheus.CounterVec // projection writes refused, by reason

	// The edge-agent contract's three turn figures, and how turns ended.
	dispatchSeconds   prometheus.Histogram
	firstReplySeconds prometheus.Histogram
	finishedSeconds   *prometheus.HistogramVec // by outcome
	prompts           *prometheus.CounterVec   // by outcome and stop reason

	liveDeltaSeconds  prometheus.Histogram
	appendConflicts   prometheus.Counter
	restores          *prometheus.CounterVec   // by tier
	permissionSeconds *prometheus.HistogramVec // by end

	// What placement sees of the runners, from their heartbeats.
	runners         prometheus.Gauge
	runnerFreeSlots prometheus.Gauge

	// Capacity quotas (quota.go): idle adapters evicted to make room, by
	// cause, and attaches refused over a quota, by quota.
	evictions     *prometheus.CounterVec
	quotaRefusals *prometheus.CounterVec
	evictFailures prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, nc *nats.Conn) *metrics {
	natsmetrics.Register(reg, natsmetrics.NewConn(natsmetrics.ServiceSession, nc))
	f := promauto.With(reg)
	m := &metrics{
		sessionsLoaded: f.NewGauge(prometheus.GaugeOpts{Name: "acp_session_sessions_loaded", Help: "Sessions held in memory by this replica."}),
		turnsStarted:   f.NewCounter(prometheus.CounterOpts{Name: "acp_session_turns_started_total", Help: "Prompts accepted."}),
		dispatches:     f.NewCounter(prometheus.CounterOpts{Name: "acp_session_prompt_dispatches_total", Help: "session/prompt requests sent to adapters."}),
		dispatchConfirms: f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_dispatch_confirms_total",
			Help: "Prompt dispatches the runner did not acknowledge (a NATS node lost the request or its answer), by how asking the runner for the adapter's status settled them: written (the prompt was on the adapter's stdin), resent (it was not; sent again and acknowledged), exited (the adapter is gone: the turn fails adapter_exited), uncertain (the runner answered nothing within session.call-timeout: the turn fails prompt_delivery_uncertain)."},
			[]string{"outcome"}),
		turnsFinished: f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_turns_finished_total", Help: "Turns finished, by outcome."}, []string{"outcome"}),
		appends:       f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_appends_total", Help: "Log appends, by result."}, []string{"result"}),
		appendSeconds: f.NewHistogram(prometheus.HistogramOpts{Name: "acp_session_append_seconds", Help: "Latency of one log append (one record or one atomic batch).", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14)}),
		appendRecords: f.NewCounter(prometheus.CounterOpts{Name: "acp_session_append_records_total", Help: "Records appended to session logs."}),
		liveDeltas:    f.NewCounter(prometheus.CounterOpts{Name: "acp_session_live_deltas_total", Help: "Ephemeral deltas published on acp.live."}),
		attachSeconds: f.NewHistogramVec(prometheus.HistogramOpts{Name: "acp_session_attach_seconds", Help: "Time to attach an adapter, by tier.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{"tier"}),
		ioRecords:     f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_io_records_total", Help: "ACP_IO records applied, by record."}, []string{"record"}),
		reclaims:      f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_reclaims_total", Help: "Adapters unloaded by idle reclaim, by reason."}, []string{"reason"}),
		takeovers:     f.NewCounter(prometheus.CounterOpts{Name: "acp_session_takeovers_total", Help: "Open turns continued by a new owner whose adapter was still working on them."}),
		stalls:        f.NewCounter(prometheus.CounterOpts{Name: "acp_session_stalls_total", Help: "Running turns found stalled: their agent said nothing for session.stall-after while no request waited on a person."}),
		queued:        f.NewCounter(prometheus.CounterOpts{Name: "acp_session_prompts_queued_total", Help: "Prompts put in a session's queue."}),
		dequeued: f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_prompts_dequeued_total",
			Help: "Prompts taken out of a session's queue, by reason: started (as a turn), withdrawn, failed (it could not start)."}, []string{"reason"}),
		queueDispatchSeconds: f.NewHistogram(prometheus.HistogramOpts{Name: "acp_session_queue_dispatch_seconds",
			Help: "From a turn's end to the acceptance of the queued prompt that starts after it, on the replica that ended it.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		asksExpired:  f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_asks_expired_total", Help: "Requests nobody answered within session.ask-timeout, answered by Skein with the safe answer, by kind (permission: reject; input: decline)."}, []string{"kind"}),
		stalledTurns: f.NewGauge(prometheus.GaugeOpts{Name: "acp_session_stalled_turns", Help: "Turns of this replica's sessions that are stalled now (their agent silent for session.stall-after)."}),
		leases:       f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_owner_leases_total", Help: "Owner lease events: acquired, held_elsewhere, renewed, renew_failed (the bucket did not acknowledge a renewal: an election, a lost publish; tried again within a second), lost, evicted."}, []string{"event"}),
		forwards:     f.NewCounter(prometheus.CounterOpts{Name: "acp_session_forwarded_requests_total", Help: "Requests passed on to the replica owning their session."}),
		fences:       f.NewCounter(prometheus.CounterOpts{Name: "acp_session_owner_fences_total", Help: "OwnerChanged records appended on taking a session over."}),
		ioGapRecords: f.NewCounter(prometheus.CounterOpts{Name: "acp_session_io_gap_records_total", Help: "ACP_IO records read from the stream to fill a gap in the live tail."}),
		ioLost:       f.NewCounter(prometheus.CounterOpts{Name: "acp_session_io_lost_records_total", Help: "Runner records ACP_IO never stored: gaps in an adapter process's record numbers that no record filled in time (session.io-gap-timeout), before the process's exit or its runner's end."}),
		ioDuplicates: f.NewCounter(prometheus.CounterOpts{Name: "acp_session_io_duplicate_records_total", Help: "ACP_IO records passed over because their record number was applied already: a runner's retry stored again after the duplicate window."}),
		ioHeld:       f.NewCounter(prometheus.CounterOpts{Name: "acp_session_io_held_records_total", Help: "ACP_IO records held until the records numbered before them were stored (stored out of number order after a fault)."}),
		ioTailMisses: f.NewCounter(prometheus.CounterOpts{Name: "acp_session_io_tail_misses_total", Help: "Times a running turn's live tail was silent while ACP_IO had records it had not delivered (a republish lost), found by the sweep's read after the last record it has."}),

		ioRejected: f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_io_rejected_total", Help: "ACP_IO records not applied, by reason (undecodable, unexpected, unnumbered, malformed_update, malformed_permission, reserved_kind)."}, []string{"reason"}),
		heldEnds: f.NewGauge(prometheus.GaugeOpts{Name: "acp_session_turn_ends_held",
			Help: "Turns ended on this replica whose TurnFinished the full store refused, held until it takes writes (storagefull.go)."}),
		livePublishErrors: f.NewCounter(prometheus.CounterOpts{Name: "acp_session_live_publish_errors_total", Help: "Live events (deltas, stderr) that could not be published."}),
		lostRecords:       f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_unrecorded_total", Help: "Records the service could not append, by record (the log is left for the next owner to reconcile)."}, []string{"record"}),
		claimsSkipped:     f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_claims_skipped_total", Help: "Claims that did not load their session, by reason (idle, owned, unreadable, failed)."}, []string{"reason"}),
		projectionSkips:   f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_projection_skips_total", Help: "ACP_SESSIONS projection writes not made, by reason (not_owner, deleted, newer, failed)."}, []string{"reason"}),

		dispatchSeconds: f.NewHistogram(prometheus.HistogramOpts{Name: "acp_session_turn_dispatch_seconds",
			Help:    "dispatch_ms: from a prompt's acceptance (its user message appended) to the runner's acknowledgement that the prompt is on the adapter's stdin; dispatches that failed are not observed.",
			Buckets: turnBuckets}),
		firstReplySeconds: f.NewHistogram(prometheus.HistogramOpts{Name: "acp_session_turn_first_reply_seconds",
			Help:    "first_reply_ms: from a prompt's acceptance to the owner applying the turn's first agent_message_chunk with non-empty text; turns continued by a takeover are not observed.",
			Buckets: turnBuckets}),
		finishedSeconds: f.NewHistogramVec(prometheus.HistogramOpts{Name: "acp_session_turn_finished_seconds",
			Help:    "finished_ms: from a prompt's acceptance to its TurnFinished appended, tools and permission waits included, by outcome; turns continued by a takeover are not observed.",
			Buckets: turnBuckets}, []string{"outcome"}),
		prompts: f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_prompts_total",
			Help: "Turns whose end was recorded, by outcome (completed, failed, cancelled) and ACP stop reason (end_turn, max_tokens, max_turn_requests, refusal, cancelled; none when the turn ended without one, other for a value ACP does not define)."},
			[]string{"outcome", "stop_reason"}),
		liveDeltaSeconds: f.NewHistogram(prometheus.HistogramOpts{Name: "acp_session_live_delta_seconds",
			Help:    "From the owner receiving the ACP_IO record of a message chunk (off acp.iotail, or read to fill a gap) to its delta published on acp.live: the session lock, the log append of what came before, and the publish. The runner's and the gateway's hops are not in it.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16)}),
		appendConflicts: f.NewCounter(prometheus.CounterOpts{Name: "acp_session_append_conflicts_total",
			Help: "Conditional log appends refused because another writer moved the session's log (JetStream wrong last sequence, 10071/10164, or wrong last msg id, 10070): this replica lost the session to another."}),
		restores: f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_restores_total",
			Help: "Adapters attached to a session that had an ACP session before, by the restore ladder's tier (resume, load, fallback); acp_session_attach_seconds has their durations, and new sessions' as tier new."},
			[]string{"tier"}),
		permissionSeconds: f.NewHistogramVec(prometheus.HistogramOpts{Name: "acp_session_permission_wait_seconds",
			Help:    "From a permission request's record appended to its response's record appended, by how it ended (answered by respondPermission, or terminal: cancelled with its turn, the adapter's exit or the session's deletion); requests rebuilt by a takeover are not observed.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 20)}, []string{"end"}),
		runners: f.NewGauge(prometheus.GaugeOpts{Name: "acp_session_runners",
			Help: "Adapter runners this replica can place sessions on: those with a heartbeat in ACP_RUNNERS (less any that just failed to answer)."}),
		runnerFreeSlots: f.NewGauge(prometheus.GaugeOpts{Name: "acp_session_runner_free_slots",
			Help: "Adapters the runners of acp_session_runners can still start, summed: capacity less load, as their last heartbeats say."}),
		evictions: f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_evictions_total",
			Help: "Idle adapters unloaded (SessionUnloaded evicted) to make room for another session's, by cause: capacity (the runners with its agent were full), namespace_quota, principal_quota (its namespace or principal was at its quota of live adapters)."},
			[]string{"cause"}),
		quotaRefusals: f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_quota_refusals_total",
			Help: "Adapter attaches refused rate_limited because a quota of live adapters was reached and none of the namespace's or principal's adapters was idle, by quota (namespace, principal)."},
			[]string{"quota"}),
		evictFailures: f.NewCounter(prometheus.CounterOpts{Name: "acp_session_eviction_failures_total",
			Help: "Evictions the owner of the chosen session did not do: it was no longer idle, or it did not answer; the next candidate is tried."}),
		budgetExhausted: f.NewCounterVec(prometheus.CounterOpts{Name: "acp_session_budget_exhausted_total",
			Help: "Spending caps reached, by cap (session: the session's own; daily: its namespace's session.budget-daily) and event (turn: a running turn cancelled, ended budget_exhausted; prompt: a prompt refused budget_exhausted)."},
			[]string{"cap", "event"}),
		budgetForeign: f.NewCounter(prometheus.CounterOpts{Name: "acp_session_budget_foreign_costs_total",
			Help: "Agent cost reports not counted toward a session's spend: in another currency than the one it counts in (its cap's)."}),
	}
	for _, c := range evictionCauses {
		m.evictions.WithLabelValues(c)
	}
	for _, c := range []string{budgetCapSession, budgetCapDaily} {
		for _, e := range []string{"turn", "prompt"} {
			m.budgetExhausted.WithLabelValues(c, e)
		}
	}
	for _, q := range quotaNames {
		m.quotaRefusals.WithLabelValues(q)
	}
	for _, o := range outcomes {
		m.turnsFinished.WithLabelValues(o)
		m.finishedSeconds.WithLabelValues(o)
		for _, r := range stopReasons {
			m.prompts.WithLabelValues(o, r)
		}
	}
	for _, t := range tiers {
		m.attachSeconds.WithLabelValues(t)
	}
	for _, t := range restoreTiers {
		m.restores.WithLabelValues(t)
	}
	for _, e := range leaseEvents {
		m.leases.WithLabelValues(e)
	}
	for _, e := range permEnds {
		m.permissionSeconds.WithLabelValues(e)
	}
	for _, r := range appendResults {
		m.appends.WithLabelValues(r)
	}
	for _, r := range ioRejectReasons {
		m.ioRejected.WithLabelValues(r)
	}
	for _, r := range unrecordedRecords {
		m.lostRecords.WithLabelValues(r)
	}
	for _, o := range []string{confirmWritten, confirmResent, confirmExited, confirmUncertain} {
		m.dispatchConfirms.WithLabelValues(o)
	}
	return m
}
