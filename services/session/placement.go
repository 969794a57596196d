package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/lifecycle"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/streams"
)

// runnerDirectory mirrors ACP_RUNNERS: which runners are alive, what agents
// they have and how loaded they are. A watch keeps it current; a miss
// re-reads the bucket before giving up, so a runner that has just started is
// found. A runner whose heartbeat is lost leaves placement at once, but
// counts as gone only once a check finds it so (runnerliveness.go).
//
// Placement puts an unpinned session's adapter on the least-loaded
// runner that has its agent, never on a placed-only one (an edge runner).
// A session opened with a placement is pinned: its open resolves the
// placement once (resolve) to the runner SessionOpened records, and every
// adapter it ever has, created, restored or taken over, is on that runner
// or nowhere. While its runner is away, it is agent_unavailable naming it.
type runnerDirectory struct {
	kv jetstream.KeyValue
	// pinger checks on a runner whose heartbeat is lost (runnerliveness.go).
	pinger runnerPinger
	lg     *slog.Logger
	// bg runs the checks of runners that lost their heartbeat.
	bg *sync.WaitGroup

	mu      sync.Mutex
	runners map[string]*events.RunnerInfo
	// instances holds each runner's nats micro instance ID, once learnt;
	// learning and checking the runners whose instance is being learnt
	// and whose liveness is being checked.
	instances          map[string]string
	learning, checking map[string]bool
	// seen is when each runner's heartbeat was last put; late the runners
	// whose heartbeat is overdue and that were checked for it since.
	seen map[string]time.Time
	late map[string]bool

	// gone is called, outside the lock, when a runner whose heartbeat was
	// deleted or expired does not answer its ping, and none of its output
	// arrived meanwhile (heard, when set).
	gone func(ctx context.Context, id events.RunnerID)
	// restarted is called, outside the lock, when a runner's heartbeat
	// comes from another process (RunnerInfo.Instance) than the one seen
	// last, first written at since; instanceOf is that last one.
	restarted  func(ctx context.Context, id events.RunnerID, since time.Time)
	instanceOf map[string]string
	heard      *heardFrom
	// judges, when set, says whether this replica may find a runner gone
	// (runnerliveness.go): not while it is cut off from the majority.
	judges func(since time.Time) bool
	// edgeLost is called, outside the lock, when an edge runner's
	// heartbeat has been lost for edgeTimeout; lostEdges are the edge
	// runners whose heartbeat is lost, since when, and the instance that
	// wrote it last (runnerliveness.go).
	edgeLost    func(ctx context.Context, id events.RunnerID)
	edgeTimeout time.Duration
	lostEdges   map[string]lostEdge
	// edgeBack, when set, is called, outside the lock, when an edge
	// runner's heartbeat is back from the same process; revs are the
	// revisions of the runners' last heartbeats seen.
	edgeBack func(ctx context.Context, id events.RunnerID)
	revs     map[string]uint64
	// m, when set, is told how many runners there are and how much room
	// they have after each change.
	m *metrics
	// checks counts the verdicts of runner checks.
	checks *prometheus.CounterVec
	// hosted, when set, says how many live adapters a runner has by the
	// sessions' projections (ledger.on). It is called under mu, and
	// takes no lock of the directory's.
	hosted func(runner string) int
}

// watchRunners returns a directory kept current by a watch that runs, in
// bg, until ctx is done; so do the checks of runners that lose their
// heartbeat, which ping them over nc.
func watchRunners(ctx context.Context, bg *sync.WaitGroup, kv jetstream.KeyValue, nc *nats.Conn, lg *slog.Logger, m *metrics, checks *prometheus.CounterVec, gone func(context.Context, events.RunnerID), heard *heardFrom, judges func(time.Time) bool, edgeLost, edgeBack func(context.Context, events.RunnerID), edgeTimeout time.Duration) (*runnerDirectory, error) {
	d := &runnerDirectory{kv: kv, pinger: natsPinger{nc}, lg: lg, bg: bg, runners: map[string]*events.RunnerInfo{},
		instances: map[string]string{}, learning: map[string]bool{}, checking: map[string]bool{},
		seen: map[string]time.Time{}, late: map[string]bool{},
		gone: gone, heard: heard, judges: judges, edgeLost: edgeLost, edgeBack: edgeBack, edgeTimeout: edgeTimeout, m: m, checks: checks}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch runners: %w", err)
	}
	bg.Go(func() { follow(ctx, w, func(e jetstream.KeyValueEntry) { d.apply(ctx, e) }) })
	bg.Go(func() { lifecycle.Every(ctx, time.Second, func() { d.checkLate(ctx) }) })
	return d, nil
}

// heartbeatLate is how long a runner's heartbeat may be overdue before the
// runner is checked: two of its puts (every third of the TTL). A runner
// killed outright leaves its heartbeat to expire a whole TTL after its
// last put; checking it once two puts are missed ends its turns
// (adapter_exited) within the TTL, the ping included, where waiting for
// the expiry took the TTL and the ping.
const heartbeatLate = 2 * streams.DefaultRunnerTTL / 3

// checkLate checks, once per missed stretch, each runner whose heartbeat
// is overdue. The check (checkRunner) pings it: one that answers, or
// whose output arrives, keeps its adapters and is left alone until its
// next heartbeat; one that does neither is gone.
func (d *runnerDirectory) checkLate(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, at := range d.seen {
		if time.Since(at) < heartbeatLate || d.late[id] || d.checking[id] {
			continue
		}
		if d.edgeHeartbeatLost(ctx, id) {
			continue // an edge runner answers no ping: its turns wait
		}
		d.late[id], d.checking[id] = true, true
		d.bg.Go(func() { d.checkRunner(ctx, id) })
	}
}

func (d *runnerDirectory) apply(ctx context.Context, e jetstream.KeyValueEntry) {
	id := e.Key()
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		if e.Operation() == jetstream.KeyValueDelete && d.edgeStopped(ctx, id) {
			return
		}
		// An edge runner's link dropped, maybe: its turns wait.
		if d.edgeHeartbeatLost(ctx, id) {
			return
		}
		// Not a runner that answers nothing, maybe, but one placement
		// must not pick until its heartbeat is back.
		delete(d.runners, id)
		delete(d.seen, id)
		d.counted()
		if !d.checking[id] {
			d.checking[id] = true
			d.bg.Go(func() { d.checkRunner(ctx, id) })
		}
		return
	}
	info, err := events.Decode[events.RunnerInfo](e.Value())
	if err != nil {
		d.lg.Warn("undecodable runner heartbeat", "key", id, events.LogKeyErr, err)
		return
	}
	if !d.edgeHeartbeatBack(ctx, id, info, e.Revision()) {
		return
	}
	if prev := d.instanceOf[id]; info.Instance != "" && prev != "" && prev != info.Instance && !info.PlacedOnly {
		// Restarted at once, its heartbeat never lapsed: the adapters
		// of the last process are gone. (An edge runner's restart is
		// edgeHeartbeatBack's.) Its new micro instance is learnt.
		delete(d.instances, id)
		since := e.Created()
		d.lg.Warn("runner restarted: its last process's adapters are gone", events.LogKeyRunner, id)
		if d.restarted != nil {
			d.bg.Go(func() { d.restarted(ctx, events.RunnerID(id), since) })
		}
	}
	if info.Instance != "" {
		if d.instanceOf == nil {
			d.instanceOf = map[string]string{}
		}
		d.instanceOf[id] = info.Instance
	}
	if d.revs == nil {
		d.revs = map[string]uint64{}
	}
	d.revs[id] = e.Revision()
	d.runners[id] = info
	d.seen[id], d.late[id] = time.Now(), false
	d.counted()
	if d.instances[id] == "" && !d.learning[id] {
		d.learning[id] = true
		d.bg.Go(func() { d.learn(ctx, id) })
	}
}

// counted sets the runner gauges from the directory. The caller holds d.mu.
func (d *runnerDirectory) counted() {
	if d.m == nil {
		return
	}
	free := 0
	for _, r := range d.runners {
		free += max(int(r.Capacity)-int(r.Load), 0)
	}
	d.m.runners.Set(float64(len(d.runners)))
	d.m.runnerFreeSlots.Set(float64(free))
}

func (d *runnerDirectory) refresh(ctx context.Context) error {
	keys, err := d.kv.ListKeys(ctx)
	if err != nil {
		return err
	}
	for k := range keys.Keys() {
		e, err := d.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		d.apply(ctx, e)
	}
	return nil
}

// allowEnv returns the environment variables a session of agent may set,
// by the lists of the runners that have it (a name allowed by any of them
// passes: the runner placement picks checks its own again), and whether
// any runner has the agent at all.
func (d *runnerDirectory) allowEnv(agent string) (allow []string, known bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.runners {
		for _, a := range r.Agents {
			if a.ID == agent {
				known = true
				allow = append(allow, r.AllowEnv[agent]...)
			}
		}
	}
	return allow, known
}

// place picks the least-loaded runner that has agent installed and room for
// one more adapter, among those a session pinned to pin ("": none) may use
// (eligible).
func (d *runnerDirectory) place(ctx context.Context, agent, pin string) (events.RunnerID, error) {
	id, err := d.pick(agent, pin)
	if err == nil {
		return id, nil
	}
	if rerr := d.refresh(ctx); rerr != nil {
		return "", events.Errorf(events.CodeUnavailable, "read runners: %v", rerr)
	}
	if pin == "" {
		d.vouchAll(ctx)
	}
	return d.pick(agent, pin)
}

// eligible reports whether an adapter of a session pinned to pin may go to
// r: a pinned session's to its runner only, wherever that is; any other
// session's to a runner inside the cluster (vouched) that takes any
// session (not placed-only). The caller holds d.mu.
func (d *runnerDirectory) eligible(r *events.RunnerInfo, pin string) bool {
	if pin != "" {
		return r.ID == pin
	}
	return !r.PlacedOnly && d.vouched(r.ID)
}

// vouched reports whether runner id is inside the cluster: it answered a
// ping of the runner service with its ID (learn). A heartbeat is the
// runner's own word, and an edge runner's credential can write its own
// with any content, placed-only or not; it cannot answer a ping (it may
// not receive $SRV subjects), so it is never vouched for, and never hosts
// a session not placed on it, whatever its heartbeat says (issue 31: the
// hub never trusts the edge). The caller holds d.mu.
func (d *runnerDirectory) vouched(id string) bool { return d.instances[id] != "" }

// vouchAll learns, now, the micro instance of every runner that says it
// takes any session and is not vouched for yet: a runner that has just
// started is placed on at once, not after learn's ping in the background.
func (d *runnerDirectory) vouchAll(ctx context.Context) {
	d.mu.Lock()
	var ids []string
	for id, r := range d.runners {
		if !r.PlacedOnly && !d.vouched(id) {
			ids = append(ids, id)
		}
	}
	d.mu.Unlock()
	for _, id := range ids {
		d.learn(ctx, id)
	}
}

// offer is what the directory knows of the runners that may host an
// adapter of one agent for a session pinned to pin (survey).
type offer struct {
	agent, pin string
	best       *events.RunnerInfo // the least loaded with room
	installed  bool               // an eligible runner has the agent installed
	full       []string           // those with no room: "id (load of capacity adapters)"
	knownBy    []string           // eligible runners that list the agent without its command
	command    string
	placedOnly []string // placed-only or unvouched runners that have it installed, which an unpinned session may not use
	runners    int      // the runners alive
	pinAlive   bool     // the runner pin is alive
}

// survey reads the directory for agent and pin. The caller holds d.mu.
func (d *runnerDirectory) survey(agent, pin string) offer {
	o := offer{agent: agent, pin: pin, runners: len(d.runners)}
	for _, r := range d.runners {
		if pin != "" && r.ID == pin {
			o.pinAlive = true
		}
		for _, a := range r.Agents {
			if a.ID != agent {
				continue
			}
			if !d.eligible(r, pin) {
				if a.Installed && (r.PlacedOnly || !d.vouched(r.ID)) {
					o.placedOnly = append(o.placedOnly, r.ID)
				}
				continue
			}
			if !a.Installed {
				o.knownBy, o.command = append(o.knownBy, r.ID), a.AdapterEntrypoint
				continue
			}
			o.installed = true
			if d.hosted != nil {
				// A heartbeat put before the runner's newest adapters
				// started says less than the sessions' projections.
				r.Load = max(r.Load, uint32(d.hosted(r.ID)))
			}
			if r.Load >= r.Capacity {
				o.full = append(o.full, fmt.Sprintf("%s (%d of %d adapters)", r.ID, r.Load, r.Capacity))
				continue
			}
			if o.best == nil || float64(r.Load)/float64(r.Capacity) < float64(o.best.Load)/float64(o.best.Capacity) {
				o.best = r
			}
		}
	}
	return o
}

// refusal is why no eligible runner could ever take the agent, whatever
// the load, or nil: the pinned runner is not connected or does not offer
// it, it is not installed where it is known, only placed-only runners
// offer it, or no runner knows it. With no runner alive nobody can tell
// (nil).
func (o offer) refusal() error {
	switch {
	case o.installed:
		return nil
	case o.pin != "" && !o.pinAlive:
		return events.Errorf(events.CodeAgentUnavailable, "runner %s is not connected", o.pin)
	case len(o.knownBy) > 0:
		return notInstalled(o.agent, o.command, o.knownBy)
	case o.pin != "":
		return events.Errorf(events.CodeAgentUnavailable, "runner %s does not offer agent %q", o.pin, o.agent)
	case len(o.placedOnly) > 0:
		slices.Sort(o.placedOnly)
		return events.Errorf(events.CodeAgentUnavailable, "agent %q is offered only by runners that host placed sessions only (%s): open the session with a placement",
			o.agent, strings.Join(o.placedOnly, ", "))
	case o.runners == 0:
		return nil
	}
	return events.Errorf(events.CodeUnknownAgent, "no runner knows agent %q", o.agent)
}

func (d *runnerDirectory) pick(agent, pin string) (events.RunnerID, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o := d.survey(agent, pin)
	switch {
	case o.best != nil:
		o.best.Load++ // until its next heartbeat says otherwise
		return events.RunnerID(o.best.ID), nil
	case o.installed && pin != "":
		return "", events.Errorf(events.CodeAgentUnavailable, "runner %s has no room: %s", pin, strings.Join(o.full, ", "))
	case o.installed:
		slices.Sort(o.full)
		return "", events.Errorf(events.CodeAgentUnavailable, "no runner with agent %q has room: runners full: %s", agent, strings.Join(o.full, ", "))
	}
	if err := o.refusal(); err != nil {
		return "", err
	}
	return "", events.Errorf(events.CodeAgentUnavailable, "no adapter-runner is alive")
}

// pinned adds, to placement's refusal of a pinned session's adapter, that
// the session cannot go elsewhere: "runner laptop is not connected;
// session s1 is pinned to it". Other errors are returned as they are.
func pinned(err error, sid events.SessionID) error {
	e := events.AsError(err)
	if e.Code != events.CodeAgentUnavailable && e.Code != events.CodeAgentNotInstalled {
		return err
	}
	return events.Errorf(e.Code, "%s; session %s is pinned to it", e.Message, sid)
}

// resolve returns the runner a new session's placement pins it to: the
// runner named, when it is connected and offers agent; or, for labels,
// the least loaded connected runner that has them all and offers agent
// (placed-only or not). No such runner is agent_unavailable, naming the
// runner or the labels. A miss re-reads the bucket once, as placement
// does. Room is placement's to find when the adapter attaches.
func (d *runnerDirectory) resolve(ctx context.Context, agent, runner string, labels map[string]string) (events.RunnerID, error) {
	id, err := d.resolveNow(agent, runner, labels)
	if err == nil {
		return id, nil
	}
	if rerr := d.refresh(ctx); rerr != nil {
		return "", events.Errorf(events.CodeUnavailable, "read runners: %v", rerr)
	}
	return d.resolveNow(agent, runner, labels)
}

func (d *runnerDirectory) resolveNow(agent, runner string, labels map[string]string) (events.RunnerID, error) {
	if runner != "" {
		d.mu.Lock()
		o := d.survey(agent, runner)
		d.mu.Unlock()
		if err := o.refusal(); err != nil {
			return "", err
		}
		return events.RunnerID(runner), nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var best *events.RunnerInfo
	for _, r := range d.runners {
		if !hasLabels(r, labels) || !slices.ContainsFunc(r.Agents, func(a events.AcpAgentEntry) bool { return a.ID == agent && a.Installed }) {
			continue
		}
		if best == nil || loadOf(r) < loadOf(best) || loadOf(r) == loadOf(best) && r.ID < best.ID {
			best = r
		}
	}
	if best == nil {
		return "", events.Errorf(events.CodeAgentUnavailable, "no connected runner has labels %s and offers agent %q", formatLabels(labels), agent)
	}
	return events.RunnerID(best.ID), nil
}

// loadOf is r's load as a share of its capacity; a runner without
// capacity is full.
func loadOf(r *events.RunnerInfo) float64 {
	if r.Capacity == 0 {
		return 1
	}
	return float64(r.Load) / float64(r.Capacity)
}

// hasLabels reports whether r has every label of want, with its value.
func hasLabels(r *events.RunnerInfo, want map[string]string) bool {
	for k, v := range want {
		if got, ok := r.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// formatLabels writes labels as "k=v,k=v", by key.
func formatLabels(labels map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + labels[k])
	}
	return b.String()
}

// refusal is the refusal placement would give an unpinned session of
// agent whatever the runners' load, or nil (offer.refusal). A refusal,
// and a directory that knows no runner (its watch may not have delivered
// yet, just after a start), re-read the bucket first, as placement does,
// so that a runner that has just started is found. A pinned session's
// runner is asked only when its adapter attaches: it may be away now.
func (d *runnerDirectory) refusal(ctx context.Context, agent string) error {
	if d.refusalNow(agent) == nil && len(d.aliveSet()) > 0 {
		return nil
	}
	if err := d.refresh(ctx); err != nil {
		return nil // placement will say what is wrong
	}
	d.vouchAll(ctx)
	return d.refusalNow(agent)
}

// refusalNow is refusal by the directory as it is.
func (d *runnerDirectory) refusalNow(agent string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.survey(agent, "").refusal()
}

// notInstalled is agent_not_installed for agent, whose command does not
// resolve on the runners knownBy.
func notInstalled(agent, command string, knownBy []string) error {
	slices.Sort(knownBy)
	return events.Errorf(events.CodeAgentNotInstalled, "agent %q is not installed: its command %q does not resolve on runner %s",
		agent, command, strings.Join(knownBy, ", "))
}

// forget drops a runner until its next heartbeat, after it failed to answer.
func (d *runnerDirectory) forget(id events.RunnerID) {
	d.mu.Lock()
	delete(d.runners, string(id))
	d.counted()
	d.mu.Unlock()
}

// aliveSet returns the runners with a heartbeat now: an adapter on a
// runner without one counts toward no quota and is no one to evict.
func (d *runnerDirectory) aliveSet() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	alive := make(map[string]bool, len(d.runners))
	for id := range d.runners {
		alive[id] = true
	}
	return alive
}

// capacity returns the adapters the runners alive can hold in all, which
// a quota given as a percentage is of.
func (d *runnerDirectory) capacity() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, r := range d.runners {
		n += int(r.Capacity)
	}
	return n
}

// full returns the runners that have agent installed and that a session
// pinned to pin may use, when err is placement's refusal for want of room
// (they are all full), else nil.
func (d *runnerDirectory) full(agent, pin string, err error) map[string]bool {
	if err == nil || events.AsError(err).Code != events.CodeAgentUnavailable {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var on map[string]bool
	for _, r := range d.runners {
		if !d.eligible(r, pin) {
			continue
		}
		for _, a := range r.Agents {
			if a.ID == agent && a.Installed {
				if on == nil {
					on = map[string]bool{}
				}
				on[r.ID] = true
			}
		}
	}
	return on
}

// freed counts one adapter fewer on runner id, until its next heartbeat
// says otherwise: an eviction stopped one there.
func (d *runnerDirectory) freed(id events.RunnerID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.runners[string(id)]; r != nil && r.Load > 0 {
		r.Load--
		d.counted()
	}
}
