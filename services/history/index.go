package history

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"sync"
	"time"

	"github.com/google/btree"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
)

// sessionIndex is what listSessions reads: every session's ACP_SESSIONS
// projection, per namespace, in list order (updatedAt newest first, then
// session ID), held in memory by each history replica. A watch of the
// bucket feeds it: first the newest value of every key, then every change
// as it is written, deletions included. A replica that starts rebuilds it
// from the bucket alone, in one pass; nothing else stores it. A page is a
// walk of a B-tree from the cursor: O(log n + limit), however many sessions
// there are.
//
// It reflects the projections, which the session service writes after the
// log (the log is the truth): a row may lag the log by the projection
// write in flight, as getSession's projected fields do.
type sessionIndex struct {
	mu   sync.RWMutex
	byNS map[events.Namespace]*btree.BTreeG[*indexRow]
	rows map[string]*indexRow // by bucket key
	// ready is closed once the watch has delivered every key's newest
	// value; built is how long that took.
	ready chan struct{}
	built time.Duration
}

// indexRow is one session in the index.
type indexRow struct {
	key     string
	ns      events.Namespace
	updated time.Time
	sid     string
	info    events.AcpDurableSessionInfo
}

// listOrder is the keyset order: updatedAt descending, then session ID.
func listOrder(a, b *indexRow) bool {
	if !a.updated.Equal(b.updated) {
		return a.updated.After(b.updated)
	}
	return a.sid < b.sid
}

func newSessionIndex() *sessionIndex {
	return &sessionIndex{
		byNS:  map[events.Namespace]*btree.BTreeG[*indexRow]{},
		rows:  map[string]*indexRow{},
		ready: make(chan struct{}),
	}
}

// run keeps the index up to date from kv until ctx ends. The watcher
// (an ordered consumer) outlives reconnections on its own.
func (x *sessionIndex) run(ctx context.Context, kv jetstream.KeyValue, onBad func(key string, err error)) error {
	start := time.Now()
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	initial := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil { // every key's newest value is in
				if initial {
					initial = false
					x.built = time.Since(start)
					close(x.ready)
				}
				continue
			}
			if err := x.apply(e); err != nil {
				onBad(e.Key(), err)
			}
		}
	}
}

// apply takes one change of the bucket: a projection written, or a
// session deleted.
func (x *sessionIndex) apply(e jetstream.KeyValueEntry) error {
	if e.Operation() != jetstream.KeyValuePut {
		x.remove(e.Key())
		return nil
	}
	ns, sid, err := events.ParseSessionKey(e.Key())
	if err != nil {
		return err
	}
	m, err := events.Decode[events.SessionMeta](e.Value())
	if err != nil {
		x.remove(e.Key()) // the index shows what it can read, no stale row
		return err
	}
	updated, err := time.Parse(events.TimestampFormat, m.Info.UpdatedAt)
	if err != nil {
		updated = time.Unix(0, 0) // a bad stamp sorts as the oldest
	}
	// A list row is no place for the queue's prompts: getSession has them.
	m.Info.Queue, m.Info.QueueHeld = nil, false
	x.put(&indexRow{key: e.Key(), ns: ns, updated: updated, sid: string(sid), info: m.Info})
	return nil
}

func (x *sessionIndex) put(r *indexRow) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.byNS[r.ns]
	if t == nil {
		t = btree.NewG(32, listOrder)
		x.byNS[r.ns] = t
	}
	if old := x.rows[r.key]; old != nil {
		t.Delete(old)
	}
	x.rows[r.key] = r
	t.ReplaceOrInsert(r)
}

func (x *sessionIndex) remove(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old := x.rows[key]
	if old == nil {
		return
	}
	delete(x.rows, key)
	t := x.byNS[old.ns]
	t.Delete(old)
	if t.Len() == 0 {
		delete(x.byNS, old.ns)
	}
}

// page returns up to limit sessions of ns after the cursor (nil: from the
// newest), and the cursor of the next page (nil on the last). A session
// updated since the cursor was made has moved ahead of it: no later page
// holds it again.
func (x *sessionIndex) page(ns events.Namespace, after *listCursor, limit int) ([]events.AcpDurableSessionInfo, *listCursor) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := []events.AcpDurableSessionInfo{}
	t := x.byNS[ns]
	if t == nil {
		return out, nil
	}
	var last *indexRow
	more := false
	visit := func(r *indexRow) bool {
		if len(out) == limit {
			more = true
			return false
		}
		out = append(out, r.info)
		last = r
		return true
	}
	if after == nil {
		t.Ascend(visit)
	} else {
		pivot := &indexRow{updated: after.updated, sid: after.sid}
		t.AscendGreaterOrEqual(pivot, func(r *indexRow) bool {
			if !listOrder(pivot, r) {
				return true // the cursor's own row: the previous page ended with it
			}
			return visit(r)
		})
	}
	if !more {
		return out, nil
	}
	return out, &listCursor{updated: last.updated, sid: last.sid}
}

// listCursor is a listSessions cursor: the keyset of the last row of a
// page. It is opaque to clients: "l1" and the base64url of the row's
// updatedAt (Unix nanoseconds, 8 bytes) and session ID.
type listCursor struct {
	updated time.Time
	sid     string
}

const listCursorPrefix = "l1"

func (c *listCursor) String() string {
	b := binary.BigEndian.AppendUint64(nil, uint64(c.updated.UnixNano()))
	b = append(b, c.sid...)
	return listCursorPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// parseListCursor reads a cursor made by String; anything else is
// invalid_cursor.
func parseListCursor(s string) (*listCursor, error) {
	bad := events.Errorf(events.CodeInvalidCursor, "%q is not a listSessions cursor", s)
	if len(s) < len(listCursorPrefix) || s[:len(listCursorPrefix)] != listCursorPrefix {
		return nil, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(s[len(listCursorPrefix):])
	if err != nil || len(b) <= 8 {
		return nil, bad
	}
	sid, err := events.ParseSessionID(string(b[8:]))
	if err != nil {
		return nil, bad
	}
	return &listCursor{updated: time.Unix(0, int64(binary.BigEndian.Uint64(b))), sid: string(sid)}, nil
}
