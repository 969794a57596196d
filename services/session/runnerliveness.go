package session

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"skein.dev/pkg/events"
)

// Runner liveness. A runner's heartbeat in ACP_RUNNERS says that it could
// write to JetStream lately, not that it is alive: during an election of
// the bucket's stream leader, or while the runner reconnects to another
// node, its heartbeat can be refused or arrive late, and a watcher can be
// handed a delete or an expiry marker for a runner whose adapters are
// working. Counting those adapters as exited fails every turn they run, for
// a storage fault that loses nothing. So a lost heartbeat only starts a
// check: the runner's nats micro instance is pinged ($SRV.PING, built by
// micro.ControlSubject). A runner that answers keeps its adapters, and is
// checked again until its heartbeat is back. So does one whose adapters'
// output reached this replica during the pings (heardFrom): a runner
// starved of CPU, or still moving to another node, answers late, but its
// records prove it alive. A runner that does neither within
// runnerPingAttempts attempts of runnerPingWait each is gone: its
// adapters count as exited (Service.runnerGone). A runner whose process
// runs but whose connection is gone has no subscription left, and so does
// not answer: it is gone, as its adapters are out of reach.
//
// The heartbeat does not name the runner's micro instance, so the
// directory learns it, when it first sees a runner, from the replies to a
// ping of the whole runner service (each reply carries its runner ID in
// its metadata). A check then pings that instance only. This is what keeps
// a runner that restarted with the same ID from vouching for the adapters
// its predecessor took down with it: the new process deletes the old
// heartbeat as it starts, and answers pings at once, but under another
// instance ID.

const (
	// runnerPingWait bounds one ping of a runner; a check makes
	// runnerPingAttempts of them, one after the other, before it calls the
	// runner gone. A ping nobody subscribes to fails at once (no
	// responders), but the next attempt still waits its turn: a runner
	// that is reconnecting to another node has, for a moment, no
	// subscription anywhere.
	runnerPingWait     = 1500 * time.Millisecond
	runnerPingAttempts = 2
	// runnerRecheck is how often a runner that answers but has no
	// heartbeat is checked again: a third of the heartbeat's lifetime, as
	// the runner writes it.
	runnerRecheck = 5 * time.Second
	// runnerIDMetadata is the key of the runner ID in the metadata of the
	// runner's nats micro service (adapter-runner's Run sets it).
	runnerIDMetadata = "runner_id"
)

// Verdicts of a runner check, the label values of
// acp_session_runner_checks_total.
const (
	verdictAlive = "alive"
	verdictGone  = "gone"
)

// newRunnerChecks returns acp_session_runner_checks_total, registered with
// reg, its series made.
func newRunnerChecks(reg prometheus.Registerer) *prometheus.CounterVec {
	c := promauto.With(reg).NewCounterVec(prometheus.CounterOpts{Name: "acp_session_runner_checks_total",
		Help: "Checks, by a nats micro ping, of runners whose heartbeat in ACP_RUNNERS was deleted or expired, made before their adapters count as exited, by verdict: alive (it answered, or its adapters' output arrived meanwhile: its adapters are kept, and it is checked again every 5 s, each check counted, until its heartbeat is back) or gone (no answer to two pings of 1.5 s, and no output: the turns of its adapters end adapter_exited)."},
		[]string{"verdict"})
	c.WithLabelValues(verdictAlive)
	c.WithLabelValues(verdictGone)
	return c
}

// heardFrom is the last time each runner's output reached this replica
// (events.RunnerID → *atomic.Int64 of Unix nanoseconds), kept by onTail:
// a runner whose records keep arriving is alive, however slowly it
// answers a ping. On a machine whose cores are all busy (the fault soak,
// 200 sessions streaming) a runner that reconnects after its node died
// can take longer than the pings to answer them while its adapters'
// output flows; counting it gone failed every turn it ran.
type heardFrom struct{ m sync.Map }

// note records that a record of runner id arrived at t.
func (h *heardFrom) note(id events.RunnerID, t time.Time) {
	v, ok := h.m.Load(id)
	if !ok {
		v, _ = h.m.LoadOrStore(id, new(atomic.Int64))
	}
	v.(*atomic.Int64).Store(t.UnixNano())
}

// since reports whether a record of runner id arrived after t.
func (h *heardFrom) since(id events.RunnerID, t time.Time) bool {
	v, ok := h.m.Load(id)
	return ok && v.(*atomic.Int64).Load() > t.UnixNano()
}

// checkRunner runs in d.bg for a runner whose heartbeat was lost, until
// the runner is found gone (then d.gone is called), or its heartbeat is
// back and it still answers, or ctx ends.
func (d *runnerDirectory) checkRunner(ctx context.Context, id string) {
	defer func() {
		d.mu.Lock()
		delete(d.checking, id)
		d.mu.Unlock()
	}()
	for warned, unsure := false, false; ; {
		start := time.Now()
		if !d.answers(ctx, id) && (d.heard == nil || !d.heard.since(events.RunnerID(id), start)) {
			if ctx.Err() != nil {
				return
			}
			if d.judges != nil && !d.judges(start) {
				// Silence heard from behind a partition proves nothing.
				if !unsure {
					d.lg.Warn("runner lost its heartbeat and does not answer, but this replica's own writes are not acknowledged: no verdict until they are", events.LogKeyRunner, id)
					unsure = true
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(runnerRecheck):
				}
				continue
			}
			d.checks.WithLabelValues(verdictGone).Inc()
			d.lg.Warn("runner lost its heartbeat and does not answer; its adapters are gone", events.LogKeyRunner, id)
			d.mu.Lock()
			delete(d.instances, id) // a runner with this ID that comes back is another process
			delete(d.runners, id)   // placed on no more (a late heartbeat's check finds it listed)
			delete(d.seen, id)
			d.counted()
			d.mu.Unlock()
			if d.gone != nil {
				d.gone(ctx, events.RunnerID(id))
			}
			return
		}
		d.checks.WithLabelValues(verdictAlive).Inc()
		d.mu.Lock()
		_, back := d.runners[id]
		d.mu.Unlock()
		if back {
			return
		}
		if !warned {
			d.lg.Warn("runner lost its heartbeat but answers; keeping its adapters", events.LogKeyRunner, id)
			warned = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(runnerRecheck):
		}
	}
}

// answers reports whether the runner id's micro instance answers a ping,
// in up to runnerPingAttempts attempts. An attempt made while this
// service's own connection is down proves nothing and is made again; a
// cancelled ctx gives false (the caller tells the two apart).
func (d *runnerDirectory) answers(ctx context.Context, id string) bool {
	for attempt := 0; attempt < runnerPingAttempts; {
		d.mu.Lock()
		instance := d.instances[id]
		d.mu.Unlock()
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, runnerPingWait)
		found, err := d.pinger.ping(pctx, id, instance)
		if found != "" {
			cancel()
			d.mu.Lock()
			if d.instances[id] == "" {
				d.instances[id] = found
			}
			d.mu.Unlock()
			return true
		}
		// Each attempt takes its whole wait, even one that failed at
		// once, so that the attempts span runnerPingAttempts waits.
		<-pctx.Done()
		cancel()
		if ctx.Err() != nil {
			return false
		}
		if !d.pinger.connected() || errors.Is(err, nats.ErrConnectionClosed) {
			continue // no verdict from a ping that could not leave
		}
		d.lg.Debug("runner ping unanswered", events.LogKeyRunner, id, "attempt", attempt, "waited", time.Since(start), events.LogKeyErr, err)
		attempt++
	}
	return false
}

// learn finds the micro instance of runner id, a runner the directory has
// just seen, by one ping of every runner: its instance is the one whose
// metadata names id. Without an answer within runnerPingWait it stays
// unknown, and is looked for again at the runner's next heartbeat.
func (d *runnerDirectory) learn(ctx context.Context, id string) {
	pctx, cancel := context.WithTimeout(ctx, runnerPingWait)
	defer cancel()
	found, err := d.pinger.ping(pctx, id, "")
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.learning, id)
	if found == "" {
		d.lg.Debug("learn a runner's micro instance", events.LogKeyRunner, id, events.LogKeyErr, err)
		return
	}
	if d.instances[id] == "" {
		d.instances[id] = found
	}
}

// A runnerPinger asks runners whether they are there.
type runnerPinger interface {
	// ping sends a ping to instance of the runner service, or, with
	// instance "", to every runner, and returns the instance ID of the
	// first answer from runner id, or "" when none came before ctx ended
	// (with the error that ended the wait: nats.ErrNoResponders when
	// nobody subscribes to the instance's subject).
	ping(ctx context.Context, id, instance string) (string, error)
	// connected reports whether a ping can leave: a ping made while the
	// service's own connection is down proves nothing.
	connected() bool
}

// natsPinger pings runners' nats micro instances over nc ($SRV.PING).
type natsPinger struct{ nc *nats.Conn }

func (p natsPinger) connected() bool { return p.nc.IsConnected() }

func (p natsPinger) ping(ctx context.Context, id, instance string) (string, error) {
	subject, err := micro.ControlSubject(micro.PingVerb, events.APIServiceRunner, instance)
	if err != nil {
		return "", err
	}
	if instance != "" {
		m, err := p.nc.RequestWithContext(ctx, subject, nil)
		if err != nil {
			return "", err
		}
		if pong, ok := pingOf(m); ok && pong.ID == instance && pong.Metadata[runnerIDMetadata] == id {
			return pong.ID, nil
		}
		return "", errors.New("a ping answer from another runner")
	}
	// Every runner answers: the one of id is looked for among them.
	inbox := p.nc.NewRespInbox()
	sub, err := p.nc.SubscribeSync(inbox)
	if err != nil {
		return "", err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := p.nc.PublishRequest(subject, inbox, nil); err != nil {
		return "", err
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return "", err
		}
		if pong, ok := pingOf(m); ok && pong.Metadata[runnerIDMetadata] == id {
			return pong.ID, nil
		}
	}
}

// pingOf decodes a micro ping answer; a status message (no responders) is
// none.
func pingOf(m *nats.Msg) (*micro.Ping, bool) {
	var pong micro.Ping
	if len(m.Data) == 0 || json.Unmarshal(m.Data, &pong) != nil || pong.Type != micro.PingResponseType {
		return nil, false
	}
	return &pong, true
}

// Edge runners. A runner that hosts only the sessions placed on it (an
// edge runner, skein runner --join) reaches the cluster over a leaf link
// that drops as laptops sleep and networks change, and answers no ping
// ($SRV is not its credential's). Its adapters work on meanwhile, their
// output kept in its outbox until the link is back. So a lost heartbeat
// of an edge runner ends nothing at once: placement skips the runner, and
// its turns wait, for Config.EdgeLinkTimeout. A heartbeat back from the
// same process (RunnerInfo.Instance) and the turns go on, their output
// arriving from the outbox; from another process (the runner restarted),
// the last one's adapters are gone with it (adapter_exited). Past the
// timeout, the turns end edge_link_lost.

// lostEdge is an edge runner whose heartbeat is lost.
type lostEdge struct {
	since    time.Time
	instance string
	rev      uint64 // the revision of its last heartbeat seen
}

// edgeCheckEvery is how often a lost edge runner's timeout is looked at.
const edgeCheckEvery = time.Second

// edgeHeartbeatLost takes runner id's lost heartbeat when it is an edge
// runner's, and reports whether it was. The caller holds d.mu.
func (d *runnerDirectory) edgeHeartbeatLost(ctx context.Context, id string) bool {
	if _, waiting := d.lostEdges[id]; waiting {
		return true // its expiry, after it was found late
	}
	info := d.runners[id]
	if info == nil || !info.PlacedOnly || d.edgeLost == nil {
		return false
	}
	delete(d.runners, id)
	delete(d.seen, id)
	d.counted()
	if d.lostEdges == nil {
		d.lostEdges = map[string]lostEdge{}
	}
	d.lostEdges[id] = lostEdge{since: time.Now(), instance: info.Instance, rev: d.revs[id]}
	d.lg.Warn("edge runner lost its heartbeat: its turns wait for its link", events.LogKeyRunner, id, "timeout", d.edgeTimeout)
	d.bg.Go(func() { d.awaitEdge(ctx, id) })
	return true
}

// edgeStopped takes the deletion of runner id's heartbeat when it is an
// edge runner's, and reports whether it was. A heartbeat expires when the
// link drops (a purge marker, edgeHeartbeatLost); it is deleted when the
// runner stops, after it stopped its adapters, or when its credential is
// revoked (skein provision runner --revoke), which cuts its link: either
// way its adapters are gone now, not after session.edge-link-timeout.
// The caller holds d.mu.
func (d *runnerDirectory) edgeStopped(ctx context.Context, id string) bool {
	_, lost := d.lostEdges[id]
	if info := d.runners[id]; !lost && (info == nil || !info.PlacedOnly) {
		return false
	}
	delete(d.lostEdges, id)
	delete(d.runners, id)
	delete(d.seen, id)
	delete(d.instances, id)
	d.counted()
	d.lg.Warn("edge runner stopped or was revoked: its adapters are gone", events.LogKeyRunner, id)
	if d.gone != nil {
		d.bg.Go(func() { d.gone(ctx, events.RunnerID(id)) })
	}
	return true
}

// edgeHeartbeatBack notes runner id's heartbeat, info at revision rev:
// an edge runner whose heartbeat was lost is back, and when another
// process wrote it, the last one's adapters are gone. It reports false
// for a heartbeat no newer than the last one seen before the loss (a
// re-read of the bucket finds it until it expires): the runner is not
// back. The caller holds d.mu.
func (d *runnerDirectory) edgeHeartbeatBack(ctx context.Context, id string, info *events.RunnerInfo, rev uint64) bool {
	lost, ok := d.lostEdges[id]
	if !ok {
		return true
	}
	if rev <= lost.rev {
		return false
	}
	delete(d.lostEdges, id)
	if info.Instance == lost.instance {
		d.lg.Info("edge runner is back", events.LogKeyRunner, id, "after", time.Since(lost.since))
		if d.edgeBack != nil {
			d.bg.Go(func() { d.edgeBack(ctx, events.RunnerID(id)) })
		}
		return true
	}
	d.lg.Warn("edge runner is back, restarted: its last process's adapters are gone", events.LogKeyRunner, id)
	if d.gone != nil {
		d.bg.Go(func() { d.gone(ctx, events.RunnerID(id)) })
	}
	return true
}

// isEdge reports whether runner id hosts only the sessions placed on it,
// as its last heartbeat said.
func (d *runnerDirectory) isEdge(id events.RunnerID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if info := d.runners[string(id)]; info != nil {
		return info.PlacedOnly
	}
	_, lost := d.lostEdges[string(id)]
	return lost
}

// awaitEdge waits for the return of edge runner id, lost at most
// d.edgeTimeout: past it, its turns end (d.edgeLost).
func (d *runnerDirectory) awaitEdge(ctx context.Context, id string) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(edgeCheckEvery):
		}
		d.mu.Lock()
		lost, ok := d.lostEdges[id]
		over := ok && time.Since(lost.since) >= d.edgeTimeout && (d.judges == nil || d.judges(time.Now()))
		if over {
			delete(d.lostEdges, id)
		}
		d.mu.Unlock()
		switch {
		case !ok:
			return // back
		case over:
			d.lg.Warn("edge runner's link stayed down past session.edge-link-timeout: its turns end", events.LogKeyRunner, id)
			d.edgeLost(ctx, events.RunnerID(id))
			return
		}
	}
}
