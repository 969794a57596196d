// Package history serves storage-only reads of sessions: history pages and
// session metadata. It reads ACP_LOG (direct gets) and ACP_SESSIONS, never
// starts, restores or queries an adapter, and writes nothing.
package history

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"skein.dev/internal/defaults"
	"skein.dev/internal/natsmetrics"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	"skein.dev/pkg/events/sessionstate"
	"skein.dev/pkg/events/streams"
)

// Config configures the history service. The largest page is not
// configurable: it is events.MaxHistoryLimit, which every client (the
// gateway's event stream backfill included) may rely on.
type Config struct {
	Replicas     int
	DefaultLimit int // page size when a request names none
}

// RegisterFlags registers the service's flags in fs, prefixed "history.".
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.DefaultLimit, "history.default-limit", events.DefaultHistoryLimit,
		fmt.Sprintf("history page size when the request names none (at most %d)", events.MaxHistoryLimit))
}

// DefaultConfig returns the configuration RegisterFlags installs before
// any flag is parsed.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("history", flag.ContinueOnError))
	return c
}

// WithDefaults returns c with RegisterFlags' defaults in the fields left
// zero.
func (c Config) WithDefaults() Config {
	defaults.Set(&c.DefaultLimit, DefaultConfig().DefaultLimit)
	return c
}

// Validate reports every invalid field; it changes nothing. New validates
// c.WithDefaults().
func (c *Config) Validate() error {
	if c.DefaultLimit <= 0 || c.DefaultLimit > events.MaxHistoryLimit {
		return fmt.Errorf("history.default-limit must be in [1, %d] (the largest page), got %d", events.MaxHistoryLimit, c.DefaultLimit)
	}
	return nil
}

// Directions of a history page: the values of acp_history_page_seconds'
// direction label.
const (
	dirForward  = "forward"
	dirBackward = "backward"
	dirEmpty    = "empty" // a session with no event yet: nothing to read
)

// Service is the history service.
type Service struct {
	cfg   Config
	lg    *slog.Logger
	nc    *nats.Conn
	ready chan struct{}
	pages *prometheus.HistogramVec

	js      jetstream.JetStream
	meta    jetstream.KeyValue
	runners jetstream.KeyValue
	index   *sessionIndex
	held    heldEnds // turn ends a full store holds (heldends.go)
	indexed prometheus.Gauge
	lists   prometheus.Histogram
}

// New returns a Service; it does no I/O.
func New(cfg Config, lg *slog.Logger, nc *nats.Conn, reg prometheus.Registerer) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if nc == nil {
		return nil, errors.New("history: nil NATS connection")
	}
	// The history service is the one that reports the streams' health
	// (acp_stream_*): a storage-only reader, it is where a look at the
	// streams belongs, and skein dev registers it once.
	streams, err := natsmetrics.NewStreams(nc, natsmetrics.DefaultStreamTimeout)
	if err != nil {
		return nil, err
	}
	natsmetrics.Register(reg, streams)
	natsmetrics.Register(reg, natsmetrics.NewConn(natsmetrics.ServiceHistory, nc))
	s := &Service{
		cfg:   cfg,
		lg:    lg.With("svc", "history"),
		nc:    nc,
		ready: make(chan struct{}),
		pages: promauto.With(reg).NewHistogramVec(prometheus.HistogramOpts{
			Name: "acp_history_page_seconds", Help: "Latency of one readHistory page, by direction (forward: after a cursor; backward: before a cursor, or the newest page; empty: a session with no event yet), from the decoded request to the page read.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 14),
		}, []string{"direction"}),
		lists: promauto.With(reg).NewHistogram(prometheus.HistogramOpts{
			Name: "acp_history_list_seconds", Help: "Latency of one listSessions page, read from the index.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 16),
		}),
		index: newSessionIndex(),
		indexed: promauto.With(reg).NewGauge(prometheus.GaugeOpts{
			Name: "acp_history_index_build_seconds", Help: "How long this replica took to build its listSessions index from ACP_SESSIONS at start.",
		}),
	}
	for _, dir := range []string{dirForward, dirBackward, dirEmpty} {
		s.pages.WithLabelValues(dir)
	}
	return s, nil
}

// Ready is closed once Run serves requests.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run serves until ctx is done. Then it stops taking requests, waits up to
// drainWait for the reads in flight, cancels those still running, and
// returns once they and the index's goroutines have ended: nothing it
// started outlives it.
func (s *Service) Run(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return err
	}
	if err := streams.Provision(ctx, js, streams.Options{Replicas: s.cfg.Replicas}, false); err != nil {
		return err
	}
	s.js = js
	if s.meta, err = js.KeyValue(ctx, events.BucketSessions); err != nil {
		return fmt.Errorf("sessions bucket: %w", err)
	}
	if s.runners, err = js.KeyValue(ctx, events.BucketRunners); err != nil {
		return fmt.Errorf("runners bucket: %w", err)
	}
	// The index is built and kept by goroutines of Run's own, which it
	// waits for before it returns.
	indexCtx, stopIndex := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer bg.Wait()
	defer stopIndex()
	indexDone := make(chan error, 1)
	bg.Go(func() {
		indexDone <- s.index.run(indexCtx, s.meta, func(key string, err error) {
			s.lg.Warn("session projection not indexed", "key", key, events.LogKeyErr, err)
		})
	})
	bg.Go(func() {
		select {
		case <-s.index.ready:
			s.indexed.Set(s.index.built.Seconds())
			s.lg.Info("session index built", "seconds", s.index.built.Seconds())
		case <-indexCtx.Done():
		}
	})
	if err := s.held.follow(ctx, s.nc); err != nil {
		return fmt.Errorf("follow turn end notices: %w", err)
	}
	eps, err := rpc.StartEndpoints(ctx, s.nc, s.lg, rpc.ServiceConfig{Config: micro.Config{
		Name:        events.APIServiceHistory,
		Description: "Skein history service: storage-only reads",
		QueueGroup:  events.APIServiceHistory,
	}})
	if err != nil {
		return fmt.Errorf("history service: %w", err)
	}
	endpoints := map[events.Op]rpc.OpHandler{
		events.OpReadHistory:  s.readHistory,
		events.OpGetSession:   s.getSession,
		events.OpListSessions: s.listSessions,
		events.OpListAgents:   s.listAgents,
		events.OpGetSessionConfig: func(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
			return cached[events.AcpGetSessionConfigRequest](ctx, s, ns, data, func(m *events.SessionMeta) events.Variant {
				return m.ConfigResponse()
			})
		},
		events.OpGetSessionCapabilities: func(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
			return cached[events.AcpGetSessionCapabilitiesRequest](ctx, s, ns, data, func(m *events.SessionMeta) events.Variant {
				return &events.AcpSessionCapabilitiesResponse{Capabilities: m.AgentCapabilities}
			})
		},
		events.OpGetSessionAgentInfo: func(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
			return cached[events.AcpGetSessionAgentInfoRequest](ctx, s, ns, data, func(m *events.SessionMeta) events.Variant {
				return &events.AcpSessionAgentInfoResponse{AgentInfo: m.AgentInfo}
			})
		},
		events.OpGetSessionCommands: func(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
			return cached[events.GetSessionCommandsRequest](ctx, s, ns, data, func(m *events.SessionMeta) events.Variant {
				return m.CommandsResponse()
			})
		},
	}
	for op, h := range endpoints {
		if err := eps.Add(rpc.Endpoint{Name: string(op), Subject: events.APIWildcard(op), Handler: h}); err != nil {
			eps.Stop(0)
			return err
		}
	}
	if err := eps.Listening(); err != nil {
		eps.Stop(0)
		return err
	}
	close(s.ready)
	s.lg.Info("history service ready")
	select {
	case <-ctx.Done():
	case err := <-indexDone:
		if ctx.Err() == nil {
			eps.Stop(0)
			return fmt.Errorf("session index: %w", err)
		}
	}
	eps.Stop(drainWait)
	return nil
}

// drainWait bounds how long a stopping service waits for the reads in
// flight before it cancels them. Every read is bounded by its own
// timeouts; this only keeps a stuck one from holding up shutdown.
const drainWait = 5 * time.Second

// indexWait bounds how long a listSessions request waits for a replica
// that is building its index.
const indexWait = 5 * time.Second

// listSessions serves a page of the caller's namespace from the index.
// It waits for the index to be built (a replica just started).
func (s *Service) listSessions(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.AcpListDurableSessionsRequest](data)
	if err != nil {
		return nil, err
	}
	limit, err := req.Validate()
	if err != nil {
		return nil, err
	}
	var after *listCursor
	if req.Cursor != nil {
		if after, err = parseListCursor(*req.Cursor); err != nil {
			return nil, err
		}
	}
	wait := time.NewTimer(indexWait)
	defer wait.Stop()
	select {
	case <-s.index.ready:
	case <-wait.C:
		return nil, events.Errorf(events.CodeUnavailable, "this replica is still building its session index")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	start := time.Now()
	rows, next := s.index.page(ns, after, limit)
	s.lists.Observe(time.Since(start).Seconds())
	resp := &events.AcpListDurableSessionsResponse{Sessions: rows}
	if next != nil {
		resp.NextCursor = new(next.String())
	}
	return resp, nil
}

func (s *Service) readHistory(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.AcpReadHistoryRequest](data)
	if err != nil {
		return nil, err
	}
	sid, err := req.Validate()
	if err != nil {
		return nil, err
	}
	limit := s.cfg.DefaultLimit
	if req.Limit != nil {
		limit = int(*req.Limit)
	}
	start := time.Now()
	page, dir, err := s.page(ctx, ns, sid, req.Before, req.After, limit, req.IncludeState)
	if err != nil {
		return nil, err
	}
	s.pages.WithLabelValues(dir).Observe(time.Since(start).Seconds())
	return page, nil
}

// page reads one page. Each costs O(limit) JetStream reads plus two to find
// the session's bounds, whatever the session's length and however its
// events are interleaved with other sessions' (eventlog.Backward finds a
// backward page by event number instead of stepping back to it).
//
// A page is bounded by bytes as well as by count (pageBudget): it is sent
// in one NATS reply, below the connection's max_payload, and an event
// larger than that is a page of its own, which the transport chunks
// (rpc.RequestChunked). hasMoreBefore and hasMoreAfter are exact either
// way: a page cut short by bytes has more in its direction.
//
// Cursors are ACP_LOG stream sequences, positions in the stream's order:
// any sequence is one, a sequence of another session's record included, and
// the page holds this session's events after (or before) it, so a cursor
// from another session reads nothing of that session and no answer names
// it. When the session's oldest events were pruned (its oldest retained
// event's number is above 1), a cursor before the oldest retained event is
// cursor_expired, naming that event's sequence: after=0 too, since the
// events it asks for are gone, and expiry is a typed error, never a silent
// skip. after = that sequence less one reads from it. A cursor beyond the
// newest event is an empty page, hasMoreAfter false.
//
// With includeState, the session's state changes are interleaved among the
// events (withState).
func (s *Service) page(ctx context.Context, ns events.Namespace, sid events.SessionID, before, after *uint64, limit int, includeState bool) (*events.AcpHistoryPageResponse, string, error) {
	subject := events.LogSubject(ns, sid, events.LogEvents)
	last, err := eventlog.Last(ctx, s.js, events.StreamLog, events.LogFilter(ns, sid))
	if err != nil {
		return nil, "", unavailable(err)
	}
	if last == nil || last.Header.Get(events.HeaderRecord) == events.RecordSessionDeleted {
		return nil, "", events.Errorf(events.CodeSessionNotFound, "session %s does not exist", sid)
	}
	oldest, err := eventlog.Forward(ctx, s.js, events.StreamLog, subject, 0, 1)
	if err != nil {
		return nil, "", unavailable(err)
	}
	page := &events.AcpHistoryPageResponse{Events: []events.AcpDurableHistoryEntry{}}
	if len(oldest) == 0 {
		return page, dirEmpty, nil
	}
	first := oldest[0]
	pruned := eventlog.EventNo(first) > 1
	budget := s.pageBudget(includeState)
	var recs []*eventlog.Record
	dir := dirForward
	switch {
	case after != nil:
		// after = first-1 asks for everything from the oldest retained
		// event on, and every pruned event is before it: not expired.
		if pruned && *after < first.Sequence-1 { // not after+1: it wraps at the largest sequence
			return nil, "", events.Errorf(events.CodeCursorExpired, "events after %d are no longer retained; the oldest retained is %d", *after, first.Sequence)
		}
		if recs, page.HasMoreAfter, err = eventlog.ForwardPage(ctx, s.js, events.StreamLog, subject, *after, limit, budget.payload); err != nil {
			return nil, "", unavailable(err)
		}
		if n := budget.fitForward(string(sid), recs); n < len(recs) {
			recs, page.HasMoreAfter = recs[:n], true
		}
		page.HasMoreBefore = len(recs) > 0 && recs[0].Sequence > first.Sequence || len(recs) == 0 && *after >= first.Sequence
	default:
		dir = dirBackward
		cursor := last.Sequence + 1
		if before != nil {
			if pruned && *before <= first.Sequence {
				return nil, "", events.Errorf(events.CodeCursorExpired, "events before %d are no longer retained; the oldest retained is %d", *before, first.Sequence)
			}
			cursor = *before
		}
		if recs, page.HasMoreBefore, err = eventlog.BackwardPage(ctx, s.js, events.StreamLog, subject, cursor, limit, budget.payload); err != nil {
			return nil, "", unavailable(err)
		}
		if n := budget.fitBackward(string(sid), recs); n < len(recs) {
			recs, page.HasMoreBefore = recs[len(recs)-n:], true
		}
		page.HasMoreAfter = before != nil && *before <= last.Sequence
	}
	page.Events = make([]events.AcpDurableHistoryEntry, 0, len(recs))
	for _, r := range recs {
		e, err := eventlog.HistoryEntry(sid, r.Sequence, r.Time, r.Header, r.Data)
		if err != nil {
			return nil, "", fmt.Errorf("session %s record %d: %w", sid, r.Sequence, err)
		}
		page.Events = append(page.Events, *e)
	}
	if includeState {
		// The range of sequences the page covers: see withState.
		lo, hi := uint64(0), max(last.Sequence, lastSeq(recs))
		switch {
		case after != nil:
			lo = *after
			if page.HasMoreAfter {
				hi = lastSeq(recs)
			}
		case page.HasMoreBefore:
			lo = recs[0].Sequence - 1
		case pruned:
			// From the oldest retained event, as a forward page from the
			// oldest cursor that is not expired: the records of pruned
			// turns are not shown either way.
			lo = first.Sequence - 1
		}
		if dir == dirBackward && before != nil {
			hi = min(hi, max(*before, 1)-1)
		}
		if page.Events, err = s.withState(ctx, ns, sid, recs, page.Events, lo, hi); err != nil {
			return nil, "", err
		}
	}
	return page, dir, nil
}

// lastSeq is the sequence of the newest of recs, 0 when there is none.
func lastSeq(recs []*eventlog.Record) uint64 {
	if len(recs) == 0 {
		return 0
	}
	return recs[len(recs)-1].Sequence
}

func (s *Service) getSession(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	return onSession[events.AcpGetDurableSessionRequest](ctx, s, ns, data, func(ctx context.Context, sid events.SessionID, meta *events.SessionMeta) (events.Variant, error) {
		return s.sessionInfo(ctx, ns, sid, meta)
	})
}

// sessionInfo is the session's durable info: its projection, with the
// log's newest public event and its state as the log says now.
func (s *Service) sessionInfo(ctx context.Context, ns events.Namespace, sid events.SessionID, meta *events.SessionMeta) (events.Variant, error) {
	// The session's newest record says whether the projection lags; when
	// it is a public event, it is also the newest public event.
	last, err := eventlog.Last(ctx, s.js, events.StreamLog, events.LogFilter(ns, sid))
	if err != nil {
		return nil, unavailable(err)
	}
	evSubject := events.LogSubject(ns, sid, events.LogEvents)
	lastEv := last
	if last != nil && last.Subject != evSubject {
		if lastEv, err = eventlog.Last(ctx, s.js, events.StreamLog, evSubject); err != nil {
			return nil, unavailable(err)
		}
	}
	info := meta.Info
	info.LatestSequence = 0
	if lastEv != nil {
		info.LatestSequence = lastEv.Sequence
	}
	info.LogSequence = 0
	if last != nil {
		info.LogSequence = last.Sequence // the state below is as of it
	}
	if info.State, err = s.currentState(ctx, ns, sid, meta, last); err != nil {
		return nil, err
	}
	if info.State, err = s.held.applyJSON(ns, sid, info.State); err != nil {
		return nil, err
	}
	info.LastTurnTiming = lastTurnTiming(meta, last)
	if info.Queue, err = s.queueNow(ctx, ns, sid, meta, last); err != nil {
		return nil, err
	}
	if info.Budget, err = s.currentBudget(ctx, ns, sid, meta, last); err != nil {
		return nil, err
	}
	return &events.AcpGetDurableSessionResponse{Session: info}, nil
}

// queueNow is the session's prompt queue as its log says now: the
// projection's, with the queue records written after it. Keys stay with
// the owner.
func (s *Service) queueNow(ctx context.Context, ns events.Namespace, sid events.SessionID, meta *events.SessionMeta, last *eventlog.Record) ([]events.QueuedPrompt, error) {
	q := slices.Clone(meta.Info.Queue)
	if last != nil && last.Sequence > meta.LogPosition {
		recs, err := eventlog.Forward(ctx, s.js, events.StreamLog, events.QueueSubjects(ns, sid), meta.LogPosition, maxLagRecords)
		if err != nil {
			return nil, unavailable(err)
		}
		for _, r := range recs {
			if q, err = sessionstate.ApplyQueue(q, r); err != nil {
				return nil, err
			}
		}
	}
	for i := range q {
		q[i].Position, q[i].IdempotencyKey = uint32(i+1), nil
	}
	return q, nil
}

// currentState is the session's state as its log says now. The projection
// is written after the log (the log is the truth), so it may lag: its
// writer is between an append and the projection write, or died there. A
// caller whose prompt returned has seen the turn's TurnFinished in the log
// and must not be told the session still runs. So last, the log's newest
// record, is compared with it: when last is newer than what the projection
// reflects, the state is derived from it: an open turn from its headers
// (eventlog.OpenTurn), a turn that ended since from its TurnFinished,
// found among the few control records after the projection.
func (s *Service) currentState(ctx context.Context, ns events.Namespace, sid events.SessionID, meta *events.SessionMeta, last *eventlog.Record) (events.JSON, error) {
	if last == nil || last.Sequence <= meta.LogPosition {
		return meta.Info.State, nil
	}
	st, err := events.ParseSessionState(meta.Info.State)
	if err != nil {
		return nil, err
	}
	turnID, _, open, err := eventlog.OpenTurn(last)
	if err != nil {
		return nil, err
	}
	switch {
	case open && st.TurnID == turnID:
		// The projected turn is still open: waiting if the projection
		// says so, stalled if the newest record says so (or the
		// projection, and no event of the agent came since), running
		// however else it lags.
		stalled := st.Status == events.StatusStalled && last.Subject != events.LogSubject(ns, sid, events.LogEvents)
		if last.Header.Get(events.HeaderRecord) == events.RecordTurnStall {
			if ts, err := events.Decode[events.TurnStall](last.Data); err == nil {
				stalled = ts.Stalled
			}
		}
		st.Status = sessionstate.Facts{TurnOpen: true, Waiting: st.Status == events.StatusWaiting, Stalled: stalled}.Status()
	case open:
		st = &events.SessionState{Status: sessionstate.Facts{TurnOpen: true}.Status(), TurnID: turnID}
	case st.TurnOpen():
		// The projected turn ended after the projection was written.
		finished, err := s.turnFinishedAfter(ctx, ns, sid, meta.LogPosition, st.TurnID)
		if err != nil {
			return nil, err
		}
		failed := finished != nil && finished.Failed()
		st = &events.SessionState{Status: sessionstate.Facts{LastFailed: failed}.Status()}
		if failed {
			e := finished.Failure()
			st.Error = &events.StateError{Code: e.Code, Message: e.Message}
		}
	default:
		return meta.Info.State, nil
	}
	return st.Encode()
}

// maxLagRecords bounds the records read after a lagging projection to find
// the TurnFinished of its turn: a projection lags by a few records, the
// ones one request appends.
const maxLagRecords = 256

// turnFinishedAfter returns the TurnFinished of turnID among the session's
// records after seq, or nil.
func (s *Service) turnFinishedAfter(ctx context.Context, ns events.Namespace, sid events.SessionID, seq uint64, turnID string) (*events.TurnFinished, error) {
	recs, err := eventlog.Forward(ctx, s.js, events.StreamLog, events.LogFilter(ns, sid), seq, maxLagRecords)
	if err != nil {
		return nil, unavailable(err)
	}
	for _, r := range recs {
		if r.Header.Get(events.HeaderRecord) != events.RecordTurnFinished || r.Header.Get(events.HeaderTurnID) != turnID {
			continue
		}
		f, err := events.Decode[events.TurnFinished](r.Data)
		if err != nil {
			return nil, err
		}
		return f, nil
	}
	return nil, nil
}

// listAgents answers from the runners' heartbeats in ACP_RUNNERS: every
// agent a live runner knows, installed when its command resolves on at
// least one of them; and each live runner, with what it offers, its
// labels, whether it hosts placed sessions only, and its load (both
// sorted by ID). It starts nothing.
func (s *Service) listAgents(ctx context.Context, _ events.Namespace, data []byte) (events.Variant, error) {
	if _, err := events.Decode[events.AcpListAgentsRequest](data); err != nil {
		return nil, err
	}
	keys, err := s.runners.ListKeys(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	agents := map[string]*events.AcpAgentEntry{}
	resp := &events.AcpListAgentsResponse{}
	for key := range keys.Keys() {
		e, err := s.runners.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // the runner's heartbeat expired meanwhile
		}
		if err != nil {
			return nil, unavailable(err)
		}
		info, err := events.Decode[events.RunnerInfo](e.Value())
		if err != nil {
			s.lg.Warn("undecodable runner heartbeat", "key", key, events.LogKeyErr, err)
			continue
		}
		runner := events.RunnerEntry{ID: info.ID, Agents: info.Agents, Labels: info.Labels, PlacedOnly: info.PlacedOnly,
			Load: info.Load, Capacity: info.Capacity}
		if runner.Agents == nil {
			runner.Agents = []events.AcpAgentEntry{}
		}
		slices.SortFunc(runner.Agents, func(a, b events.AcpAgentEntry) int { return strings.Compare(a.ID, b.ID) })
		resp.Runners = append(resp.Runners, runner)
		for _, a := range info.Agents {
			got, ok := agents[a.ID]
			switch {
			case !ok:
				entry := a
				agents[a.ID] = &entry
			case a.Installed && !got.Installed:
				*got = a
			}
		}
	}
	resp.Agents = make([]events.AcpAgentEntry, 0, len(agents))
	for _, a := range agents {
		resp.Agents = append(resp.Agents, *a)
	}
	slices.SortFunc(resp.Agents, func(a, b events.AcpAgentEntry) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(resp.Runners, func(a, b events.RunnerEntry) int { return strings.Compare(a.ID, b.ID) })
	return resp, nil
}

// sessionMeta reads the session's ACP_SESSIONS entry: session_not_found
// when there is none.
func (s *Service) sessionMeta(ctx context.Context, ns events.Namespace, sid events.SessionID) (*events.SessionMeta, error) {
	key := events.SessionKey(ns, sid)
	entry, err := s.meta.Get(ctx, key)
	if err == nil {
		return events.Decode[events.SessionMeta](entry.Value())
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, unavailable(err)
	}
	value, err := leaderEntry(ctx, s.js, events.BucketSessions, key)
	if err != nil {
		return nil, unavailable(err)
	}
	if value == nil {
		return s.metaFromLog(ctx, ns, sid)
	}
	return events.Decode[events.SessionMeta](value)
}

// metaFromLog is the projection of a session whose log holds it but whose
// ACP_SESSIONS entry is not written yet: the projection is best effort,
// written after the log, and an owner cut off from the store (a
// partition) can have acknowledged the open whose projection it then
// could not write. A client told that its open succeeded must not then
// read that its session does not exist (the fault tests check every
// client's history). So the session's SessionOpened, its newest record
// not a deletion, is a projection of position 0, its state the log's
// (currentState).
func (s *Service) metaFromLog(ctx context.Context, ns events.Namespace, sid events.SessionID) (*events.SessionMeta, error) {
	notFound := events.Errorf(events.CodeSessionNotFound, "session %s does not exist", sid)
	opened, err := eventlog.Last(ctx, s.js, events.StreamLog, events.OpenedSubject(ns, sid))
	if err != nil {
		return nil, unavailable(err)
	}
	if opened == nil {
		return nil, notFound
	}
	last, err := eventlog.Last(ctx, s.js, events.StreamLog, events.LogFilter(ns, sid))
	if err != nil {
		return nil, unavailable(err)
	}
	if last == nil || last.Header.Get(events.HeaderRecord) == events.RecordSessionDeleted {
		return nil, notFound
	}
	o, err := events.Decode[events.SessionOpened](opened.Data)
	if err != nil {
		return nil, err
	}
	idle, err := (&events.SessionState{Status: events.StatusIdle}).Encode()
	if err != nil {
		return nil, err
	}
	return &events.SessionMeta{Namespace: string(ns), PermissionPolicy: o.PermissionPolicy, Info: events.AcpDurableSessionInfo{
		SessionID: string(sid), Agent: o.Agent, Cwd: o.Cwd, AdditionalDirectories: o.AdditionalDirectories, State: idle,
		CreatedAt: opened.Time.UTC().Format(events.TimestampFormat), UpdatedAt: last.Time.UTC().Format(events.TimestampFormat), Runner: o.Runner, CreatedBy: o.CreatedBy,
	}}, nil
}

// onSession serves a request on one session: it decodes and checks the
// request, reads the session's ACP_SESSIONS entry (session_not_found when
// there is none), and returns answer's answer.
func onSession[T any, PT interface {
	*T
	events.Variant
	Validate() (events.SessionID, error)
}](ctx context.Context, s *Service, ns events.Namespace, data []byte,
	answer func(ctx context.Context, sid events.SessionID, meta *events.SessionMeta) (events.Variant, error)) (events.Variant, error) {
	req, err := events.Decode[T, PT](data)
	if err != nil {
		return nil, err
	}
	sid, err := req.Validate()
	if err != nil {
		return nil, err
	}
	meta, err := s.sessionMeta(ctx, ns, sid)
	if err != nil {
		return nil, err
	}
	return answer(ctx, sid, meta)
}

// cached answers a cached getter from the session's ACP_SESSIONS
// projection: what the adapter last reported (configuration options and
// their revision, capabilities, agent info, available commands). It never starts, restores or
// asks an adapter.
func cached[T any, PT interface {
	*T
	events.Variant
	Validate() (events.SessionID, error)
}](ctx context.Context, s *Service, ns events.Namespace, data []byte, answer func(*events.SessionMeta) events.Variant) (events.Variant, error) {
	return onSession[T, PT](ctx, s, ns, data, func(_ context.Context, _ events.SessionID, meta *events.SessionMeta) (events.Variant, error) {
		return answer(meta), nil
	})
}

func unavailable(err error) error {
	if e, ok := errors.AsType[*events.Error](err); ok {
		return e
	}
	return events.Errorf(events.CodeUnavailable, "read log: %v", err)
}
