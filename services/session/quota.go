package session

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
)

// Quota bounds the live adapters of one namespace or one principal: N
// adapters, or, with Percent, N percent of the capacity of the runners
// alive (rounded up, at least one). Zero is unlimited.
type Quota struct {
	N       int
	Percent bool
}

// The default quotas: half of the cluster's adapters for one namespace,
// and half for one principal. Whatever one tenant holds, and even when
// every one of its adapters is in a turn (which no eviction touches),
// the other half stays for everyone else; a lone tenant still has half
// the cluster busy at once, and past that its own idle adapters make way
// for its new ones. A percentage follows the cluster as runners come and
// go, where a fixed number would be too small for a large cluster or the
// whole of a small one.
var (
	DefaultNamespaceQuota = Quota{N: 50, Percent: true}
	DefaultPrincipalQuota = Quota{N: 50, Percent: true}
)

// String returns q as Set reads it.
func (q *Quota) String() string {
	if q.Percent {
		return strconv.Itoa(q.N) + "%"
	}
	return strconv.Itoa(q.N)
}

// Set reads "N" or "N%".
func (q *Quota) Set(s string) error {
	num, pct := strings.CutSuffix(s, "%")
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || pct && n > 100 {
		return fmt.Errorf("quota %q: want a number of adapters, or a percentage of the runners' capacity (0%%-100%%)", s)
	}
	*q = Quota{N: n, Percent: pct}
	return nil
}

// limit is the quota for runners of capacity adapters in all; 0 is
// unlimited. A percentage of no runners is unlimited too: placement then
// says there is no runner.
func (q Quota) limit(capacity int) int {
	if !q.Percent || q.N == 0 {
		return q.N
	}
	if capacity == 0 {
		return 0
	}
	return max(1, int(math.Ceil(float64(capacity)*float64(q.N)/100)))
}

// hostedAdapter is one live adapter as the ledger knows it.
type hostedAdapter struct {
	key       string
	ns        events.Namespace
	sid       events.SessionID
	principal string
	runner    string
	// idle: no turn runs in the session, so nothing waits for an answer
	// either (a permission request lives in a turn).
	idle bool
	used time.Time // the session's last activity (its projection's updatedAt)
}

// reservation counts an adapter this replica is attaching, until its
// projection says so: a second attach in the same namespace, on this
// replica, must not find the first one's slot free.
type reservation struct {
	ns        events.Namespace
	principal string
	pos       uint64 // the session's log position when the attach began
	until     time.Time
}

// ledger counts the live adapters of the whole cluster, by namespace and
// principal, and finds the least recently used idle ones. Its truth is
// ACP_SESSIONS: every session's owner projects there whether an adapter
// serves the session (SessionMeta.Hosted), on which runner, for which
// principal, the session's status and its last activity; and every
// replica follows the bucket, so all of them count the same adapters,
// whichever replica attached them. A runner's heartbeat could carry its
// counts too, but it is put only every few seconds, and the runner knows
// neither the principal nor whether a turn runs; the projection is
// written on every change the owner makes.
type ledger struct {
	mu       sync.Mutex
	hosted   map[string]*hostedAdapter
	reserved map[string]reservation
	// evicting are the adapters an eviction of this replica is under way
	// for: no other picks them.
	evicting map[string]bool
	// loaded is closed once the bucket's current entries are applied.
	loaded   chan struct{}
	doneLoad bool
	// rev is the bucket revision applied last; changed is closed, and
	// replaced, whenever it moves.
	rev     uint64
	changed chan struct{}
	kv      jetstream.KeyValue
}

// watchAdapters follows ACP_SESSIONS, in bg until ctx is done.
func watchAdapters(ctx context.Context, bg *sync.WaitGroup, kv jetstream.KeyValue) (*ledger, error) {
	l := &ledger{hosted: map[string]*hostedAdapter{}, reserved: map[string]reservation{},
		evicting: map[string]bool{}, loaded: make(chan struct{}), changed: make(chan struct{}), kv: kv}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch sessions: %w", err)
	}
	bg.Go(func() {
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				l.apply(e)
			}
		}
	})
	return l, nil
}

// apply takes in one ACP_SESSIONS entry; nil marks the end of the
// bucket's current entries.
func (l *ledger) apply(e jetstream.KeyValueEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e == nil {
		if !l.doneLoad {
			l.doneLoad = true
			close(l.loaded)
		}
		return
	}
	l.rev = max(l.rev, e.Revision())
	close(l.changed)
	l.changed = make(chan struct{})
	key := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		delete(l.hosted, key)
		delete(l.reserved, key)
		return
	}
	m, err := events.Decode[events.SessionMeta](e.Value())
	if err != nil {
		return // not a projection this replica can read: it counts nothing
	}
	// The attaching replica holds the session, so the next projection
	// of it is the attach's own, made or failed; catchUp applied every
	// earlier one before the reservation was made.
	if r, ok := l.reserved[key]; ok && m.LogPosition >= r.pos {
		delete(l.reserved, key)
	}
	if !m.Hosted {
		delete(l.hosted, key)
		return
	}
	h := &hostedAdapter{key: key, ns: events.Namespace(m.Namespace), sid: events.SessionID(m.Info.SessionID),
		principal: m.Principal, runner: m.RunnerID, idle: true}
	if st, err := events.ParseSessionState(m.Info.State); err == nil {
		h.idle = st.Status == events.StatusIdle || st.Status == events.StatusFailed
	}
	h.used, _ = time.Parse(events.TimestampFormat, m.Info.UpdatedAt)
	l.hosted[key] = h
}

// catchUp returns once the ledger has applied every projection written
// before it was called, whichever replica wrote it: an attach counts the
// adapters attached before it began, its own replica's and the others'.
// The bucket's last revision may be a message that is gone already (a
// later purge removed it), which the watch never delivers: past
// catchUpWait, the ledger counts what it has.
func (l *ledger) catchUp(ctx context.Context) error {
	select {
	case <-l.loaded:
	case <-ctx.Done():
		return events.Errorf(events.CodeUnavailable, "the live adapters are not counted yet: %v", ctx.Err())
	}
	st, err := l.kv.Status(ctx)
	if err != nil {
		return events.Errorf(events.CodeUnavailable, "sessions bucket: %v", err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return nil
	}
	last := bs.StreamInfo().State.LastSeq
	timeout := time.NewTimer(catchUpWait)
	defer timeout.Stop()
	for {
		l.mu.Lock()
		rev, changed := l.rev, l.changed
		l.mu.Unlock()
		if rev >= last {
			return nil
		}
		select {
		case <-changed:
		case <-timeout.C:
			return nil
		case <-ctx.Done():
			return events.Errorf(events.CodeUnavailable, "the live adapters are not counted yet: %v", ctx.Err())
		}
	}
}

// catchUpWait bounds catchUp's wait for the watch: it delivers a
// projection within milliseconds of its write.
const catchUpWait = 2 * time.Second

// count returns how many live adapters match, those on runners not alive
// and the session self left out, and the reservations that match.
func (l *ledger) count(match func(*hostedAdapter) bool, alive map[string]bool, self string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for key, h := range l.hosted {
		if key != self && alive[h.runner] && match(h) {
			n++
		}
	}
	now := time.Now()
	for key, r := range l.reserved {
		switch {
		case now.After(r.until):
			delete(l.reserved, key) // its attach failed, or its projection was lost
		case key != self && l.hosted[key] == nil && match(&hostedAdapter{key: key, ns: r.ns, principal: r.principal}):
			n++
		}
	}
	return n
}

// reserve counts the adapter being attached to the session key until its
// projection at a log position past pos arrives, or until until.
func (l *ledger) reserve(key string, r reservation) {
	l.mu.Lock()
	l.reserved[key] = r
	l.mu.Unlock()
}

func (l *ledger) unreserve(key string) {
	l.mu.Lock()
	delete(l.reserved, key)
	l.mu.Unlock()
}

// pickLRU returns the least recently used idle adapter that matches, on a
// runner alive, other than self's and those in skip, and marks it as
// being evicted. ok is false when there is none.
func (l *ledger) pickLRU(match func(*hostedAdapter) bool, alive map[string]bool, self string, skip map[string]bool) (hostedAdapter, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var idle []*hostedAdapter
	for key, h := range l.hosted {
		if key != self && h.idle && !skip[key] && !l.evicting[key] && alive[h.runner] && match(h) {
			idle = append(idle, h)
		}
	}
	if len(idle) == 0 {
		return hostedAdapter{}, false
	}
	lru := slices.MinFunc(idle, func(a, b *hostedAdapter) int {
		if c := a.used.Compare(b.used); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	l.evicting[lru.key] = true
	return *lru, true
}

// evicted ends the eviction of h: done, its adapter no longer counts
// (until a projection says it is back); not done, it counts as before.
func (l *ledger) evicted(h hostedAdapter, done bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.evicting, h.key)
	if done {
		delete(l.hosted, h.key)
	}
}

// on returns how many live adapters runner hosts: placement counts a
// runner at least that loaded, whatever its last heartbeat said (one put
// before its newest adapters started).
func (l *ledger) on(runner string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, h := range l.hosted {
		if h.runner == runner {
			n++
		}
	}
	return n
}
