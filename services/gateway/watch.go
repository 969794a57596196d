package gateway

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// Watch's timeout: the default, and the longest a client may ask for.
const (
	DefaultWatchTimeout = 15 * time.Second
	MaxWatchTimeout     = 30 * time.Second
)

// watchCoalesce is how long a watch that woke on a new record waits for
// the rest of its burst before it reads: a turn's updates come in one
// answer, not one each.
const watchCoalesce = 5 * time.Millisecond

// watchQuery is GET .../watch's query.
type watchQuery struct {
	after   uint64
	timeout time.Duration
	limit   *uint32
}

// handleWatch serves GET /v1/sessions/{id}/watch?after=&timeout=&limit=:
// a long poll for clients that cannot hold a stream. It answers as soon as
// the session's log holds a record after the cursor (a durable event, or
// a record that may change the state, such as a turn's end), with a
// history page after the cursor and the session's state: {events,
// hasMoreBefore, hasMoreAfter, state, cursor}; at the timeout, with no
// events, the state, and the same cursor. cursor is what to ask after
// next.
//
// Waiting is a read of the log: the handler joins the session's live feed
// (hub.go) first, then reads the state, with the log sequence it is as of
// (AcpDurableSessionInfo.LogSequence), and answers at once when that is
// past the cursor. Else only something stored after that read can wake
// it; no request is held open across a turn anywhere behind the gateway.
// The feed wakes it for a public event or a lifecycle record, and for a
// record the feed found by reading where the log ends rather than by its
// republish: a watch does not sit until its timeout for a record whose
// republish nobody on this gateway received (feedend.go). The session's
// watches and event streams on this gateway share the feed's two
// subscriptions.
//
// The cursor answered covers the records the answer's state reflects, not
// only its events: a turn's end is a lifecycle record, no public event,
// and a watch that answered "running" with a cursor at the turn's last
// event would, when the end was stored before the next poll joined the
// feed, find no event after the cursor and nothing to wake it.
func (g *Gateway) handleWatch(w http.ResponseWriter, r *http.Request) error {
	ns, sid, err := g.target(r)
	if err != nil {
		return err
	}
	q, err := parseWatchQuery(r.URL.Query())
	if err != nil {
		return err
	}
	v := newWatchViewer()
	f, err := g.hub.join(r.Context(), ns, sid, v)
	if err != nil {
		return err
	}
	defer g.hub.leave(f, v)
	ctx, cancel := g.callContext(r)
	err = g.nc.FlushWithContext(ctx)
	cancel()
	if err != nil {
		return events.Errorf(events.CodeUnavailable, "flush subscription: %v", err)
	}

	info, err := g.watchState(r, ns, sid)
	if err != nil {
		return err
	}
	woke := info.LogSequence > q.after
	if !woke {
		timeout := time.NewTimer(q.timeout)
		defer timeout.Stop()
		select {
		case <-v.wake:
			woke = true
			coalesce := time.NewTimer(watchCoalesce)
			select {
			case <-coalesce.C:
			case <-r.Context().Done():
				coalesce.Stop()
				return nil
			}
		case <-timeout.C:
		case <-g.stopping:
		case <-r.Context().Done():
			return nil // the client left
		case <-g.grantChanges(r):
			// A grant revoked while the watch waited ends it; one that
			// stands answers now, as a timeout would.
			if _, err := g.recheck(r); err != nil {
				return err
			}
		}
		if info, err = g.watchState(r, ns, sid); err != nil {
			return err
		}
	}

	// A watch that did not wake answers no events and the same cursor,
	// and the state as it is now: when that reflects records past the
	// cursor (the narrow windows in which a record's republish reached no
	// feed on this gateway), the next poll answers at once.
	page := &events.AcpHistoryPageResponse{
		Events: []events.AcpDurableHistoryEntry{},
		// Exact when nothing was stored after the cursor: the newest
		// event is at or before it.
		HasMoreBefore: info.LatestSequence != 0 && info.LatestSequence <= q.after,
	}
	cursor := q.after
	if woke && info.LogSequence > q.after {
		req := &events.AcpReadHistoryRequest{SessionID: new(string(sid)), After: &q.after, Limit: q.limit}
		ctx, cancel := g.callContext(r)
		page, err = g.readHistory(ctx, ns, req)
		cancel()
		if err != nil {
			return err
		}
		cursor = watchCursor(page, q.after, info.LogSequence)
	}
	b, err := renderHistory(page)
	if err != nil {
		return err
	}
	b = b[:len(b)-1] // the page's closing brace
	b = append(b, `,"state":`...)
	b = append(b, info.State...)
	b = append(b, `,"cursor":`...)
	b = strconv.AppendUint(b, cursor, 10)
	b = append(b, '}')
	writeJSON(w, http.StatusOK, b)
	return nil
}

// watchState reads the session's info: its state, and the log sequence
// the state is as of.
func (g *Gateway) watchState(r *http.Request, ns events.Namespace, sid events.SessionID) (*events.AcpDurableSessionInfo, error) {
	ctx, cancel := g.callContext(r)
	defer cancel()
	res, err := rpc.Call[events.AcpGetDurableSessionResponse](ctx, g.nc, events.APISubject(ns, events.OpGetSession),
		&events.AcpGetDurableSessionRequest{SessionID: new(string(sid))}, nil)
	if err != nil {
		return nil, err
	}
	return &res.Session, nil
}

// watchCursor is the cursor a watch answers with, given that the state
// was read as of the log sequence stateSeq and then page, after the
// cursor after. The page's events past stateSeq are dropped from it:
// stored after the state was read, they come with a state that reflects
// them, on the next poll, at once. The cursor is then stateSeq, the
// records the state reflects, when the page holds every event up to it;
// when a limit cut the page short, the page's last event.
func watchCursor(page *events.AcpHistoryPageResponse, after, stateSeq uint64) uint64 {
	n := len(page.Events)
	for n > 0 && page.Events[n-1].Sequence > stateSeq {
		n--
	}
	if n < len(page.Events) {
		page.Events, page.HasMoreAfter = page.Events[:n], true
		return max(after, stateSeq)
	}
	if page.HasMoreAfter && n > 0 {
		return page.Events[n-1].Sequence
	}
	return max(after, stateSeq)
}

// parseWatchQuery reads watch's query: after (default 0), timeout (whole
// seconds, or a duration such as "500ms"; default 15 s, at most 30 s) and
// limit, each at most once.
func parseWatchQuery(q url.Values) (*watchQuery, error) {
	if err := onlyKeys(q, "after", "timeout", "limit"); err != nil {
		return nil, err
	}
	wq := &watchQuery{timeout: DefaultWatchTimeout}
	if s, ok, err := single(q, "after"); err != nil {
		return nil, err
	} else if ok {
		if wq.after, err = parseSeq("after", s); err != nil {
			return nil, err
		}
	}
	if s, ok, err := single(q, "timeout"); err != nil {
		return nil, err
	} else if ok {
		d, err := time.ParseDuration(s)
		if n, nerr := strconv.ParseUint(s, 10, 32); nerr == nil {
			d, err = time.Duration(n)*time.Second, nil
		}
		if err != nil || d <= 0 || d > MaxWatchTimeout {
			return nil, events.Errorf(events.CodeInvalidRequest, "timeout must be whole seconds or a duration in (0, %v], got %q", MaxWatchTimeout, events.Truncate(s, 40))
		}
		wq.timeout = d
	}
	var err error
	if wq.limit, err = parseLimit(q, events.MaxHistoryLimit); err != nil {
		return nil, err
	}
	return wq, nil
}
