package session

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session/internal/applier"
)

// open records a new session, or checks that an existing one was opened with
// the same options, and attaches an adapter when none is.
//
// A refused open leaves no session: an agent that no runner knows, or
// that none has installed, is refused before anything is recorded; a
// session this open recorded and then could not start an adapter for is
// deleted again. Otherwise the failed open would leave a session under
// options that did not work, and every later open of the ID with the
// right ones would be session_conflict until someone deleted it.
//
// A new session's cap (budget.go) is recorded with its SessionOpened, in
// one append: the open's budget, else the namespace's default. A reopen
// whose budget is not the session's cap now is session_conflict (PATCH
// changes it); one without a budget matches any.
func (sess *session) open(ctx context.Context, o *events.SessionOpened, budget *events.Budget) error {
	if err := sess.load(ctx); err != nil {
		return err
	}
	created := false
	if sess.opened == nil {
		// A placement is resolved once, here, to the runner the session
		// is pinned to for good; an unplaced session is refused now if no
		// runner could ever take it.
		if o.Runner != "" || len(o.Labels) > 0 {
			runner, err := sess.svc.runners.resolve(ctx, o.Agent, o.Runner, o.Labels)
			if err != nil {
				return err
			}
			o.Runner = string(runner)
		} else if err := sess.svc.runners.refusal(ctx, o.Agent); err != nil {
			return err
		}
		entries := []eventlog.Entry{{Kind: events.LogControl, Value: o, Subject: events.OpenedSubject(sess.ns, sess.sid)}}
		maxCost := sess.svc.cfg.BudgetDefault.For(sess.ns)
		if budget != nil {
			maxCost = budget.MaxCost
		}
		var b events.BudgetChanged
		if maxCost != nil {
			b, _ = withCap(b, maxCost) // nothing spent: no currency to refuse
			entries = append(entries, budgetEntry(sess.ns, sess.sid, b))
		}
		if _, err := sess.append(ctx, ioPos{}, entries...); err != nil {
			return err
		}
		sess.opened, sess.budget = o, b
		sess.moved(onOpen)
		sess.createdAt = time.Now()
		created = true
		sess.lg.Info("session opened", events.LogKeyAgent, o.Agent)
	} else if !samePlacement(sess.opened, o) {
		return events.Errorf(events.CodeSessionConflict, "session %s exists %s; open it with the same placement, or delete it", sess.sid, placementOf(sess.opened))
	} else if !sameOptions(sess.opened, o) {
		return events.Errorf(events.CodeSessionConflict, "session %s exists with other options; delete it or open it with the same ones", sess.sid)
	} else if budget != nil && !sameCap(budget.MaxCost, sess.budget.MaxCost) {
		return events.Errorf(events.CodeSessionConflict, "session %s exists with another spending cap; change it with PATCH, or open it without a budget", sess.sid)
	}
	if sess.adapter == nil {
		if err := sess.attach(ctx); err != nil {
			if created {
				// The session this open recorded goes: its log keeps only
				// the tombstone, which reads as no session (GET and history
				// answer session_not_found, the list leaves it out) and lets
				// the ID be opened again, with any options. If that fails
				// too the session stays, projected, as an open that failed.
				if derr := sess.delete(ctx); derr != nil {
					sess.lg.Warn("remove the session a failed open recorded", events.LogKeyErr, derr, "cause", err)
					sess.project(ctx)
				} else {
					sess.lg.Info("failed open removed", "cause", err)
				}
				return err
			}
			sess.project(ctx)
			return err
		}
	}
	sess.project(ctx)
	return nil
}

func sameOptions(a, b *events.SessionOpened) bool {
	return a.Agent == b.Agent && a.Cwd == b.Cwd && a.PermissionPolicy == b.PermissionPolicy && a.InputPolicy == b.InputPolicy &&
		a.SkipOsInstructions == b.SkipOsInstructions &&
		string(a.AdditionalDirectories) == string(b.AdditionalDirectories) &&
		string(a.Env) == string(b.Env) && string(a.McpServers) == string(b.McpServers) &&
		((a.AdditionalInstructions == nil) == (b.AdditionalInstructions == nil)) &&
		(a.AdditionalInstructions == nil || *a.AdditionalInstructions == *b.AdditionalInstructions)
}

// samePlacement reports whether a reopen's placement b is the one the
// session was opened with (a): none for an unpinned session; for a pinned
// one, the labels that chose its runner, or that runner named.
func samePlacement(a, b *events.SessionOpened) bool {
	if len(b.Labels) > 0 {
		return maps.Equal(a.Labels, b.Labels)
	}
	return a.Runner == b.Runner
}

// placementOf says where a session was placed, for an error.
func placementOf(o *events.SessionOpened) string {
	switch {
	case o.Runner == "":
		return "without a placement"
	case len(o.Labels) > 0:
		return fmt.Sprintf("pinned to runner %s by labels %s", o.Runner, formatLabels(o.Labels))
	}
	return "pinned to runner " + o.Runner
}

// attach starts an adapter for the session on a runner and records it. Until
// the restore ladder is built, every attach negotiates a new ACP session.
func (sess *session) attach(ctx context.Context) error {
	// A runner that does not answer (its heartbeat outlived it) is left out
	// and the next one tried.
	var err error
	for range 3 {
		var runner events.RunnerID
		if runner, err = sess.attachOnce(ctx); err == nil || runner == "" || events.AsError(err).Code != events.CodeUnavailable {
			return err
		}
		sess.svc.runners.forget(runner)
	}
	if pin := sess.opened.Runner; pin != "" {
		// It has no other to go to: its runner is as good as gone.
		return events.Errorf(events.CodeAgentUnavailable, "runner %s does not answer (%s); session %s is pinned to it", pin, events.AsError(err).Message, sess.sid)
	}
	return err
}

// attachOnce attaches an adapter on the runner placement picks, which it
// returns with any error.
func (sess *session) attachOnce(ctx context.Context) (events.RunnerID, error) {
	svc := sess.svc
	start := time.Now()
	runner, err := svc.placeAdapter(ctx, sess) // within the quotas, evicting to make room (evict.go)
	if err != nil {
		return "", err
	}
	r := &route{sess: sess, runner: runner, processID: nuid.Next(), attachedAt: time.Now()}
	// Follow the session's ACP_IO before the adapter exists, so nothing it
	// says is missed: from the newest record there now.
	last, err := eventlog.Last(ctx, svc.js, events.StreamIO, r.ioSubject())
	if err != nil {
		return runner, events.Errorf(events.CodeUnavailable, "io stream: %v", err)
	}
	var read uint64
	if last != nil {
		read = last.Sequence
	}
	// A new process numbers its records from 1.
	r.io = applier.New[*eventlog.Record](r.processID, read)
	ioStart := read + 1
	if err := r.follow(read); err != nil {
		return runner, events.Errorf(events.CodeUnavailable, "follow io: %v", err)
	}
	sess.adapter = r
	sess.moved(onAttach)

	cctx, cancel := context.WithTimeout(ctx, svc.cfg.AttachTimeout)
	defer cancel()
	tier, reason, created, err := r.startAdapter(cctx)
	if err != nil {
		sess.detach()
		return runner, err
	}
	r.acpSessionID = created.SessionID
	sess.moved(onAttached)
	forkPreamble, tier, reason := sess.forkContinuation(ctx, tier, reason)
	attached := &events.AdapterAttached{
		RunnerID:          string(runner),
		ProcessID:         r.processID,
		Pid:               created.Pid,
		AcpSessionID:      created.SessionID,
		Tier:              tier,
		TierReason:        reason,
		AgentCapabilities: created.AgentCapabilities,
		AgentInfo:         created.AgentInfo,
		Modes:             created.Modes,
		ConfigOptions:     created.ConfigOptions,
		IOStartSeq:        ioStart,
	}
	if _, err := sess.append(ctx, ioPos{}, eventlog.Entry{Kind: events.LogControl, Value: attached}); err != nil {
		r.stopAdapter(ctx)
		return runner, err
	}
	sess.meta.AcpSessionID = created.SessionID
	sess.meta.RunnerID, sess.meta.ProcessID = string(runner), r.processID
	sess.meta.AgentCapabilities = created.AgentCapabilities
	sess.meta.AgentInfo = created.AgentInfo
	cached := sess.meta.ConfigOptions
	if !slices.EqualFunc(sess.meta.ConfigOptions, created.ConfigOptions, func(a, b events.JSON) bool { return string(a) == string(b) }) {
		sess.meta.ConfigOptions = created.ConfigOptions
		sess.meta.ConfigRevision++
	}
	if tier != events.TierNew {
		if err := r.reapplyConfig(ctx, cached); err != nil {
			return runner, err
		}
	}
	if tier == events.TierFallback {
		// The agent lost the session: the next prompt brings it the recent
		// history, once.
		if sess.preamble, err = sess.svc.logOf(sess.ns, sess.sid).preamble(ctx, sess.w.Position().LastSeq+1, sess.svc.cfg.MaxPreambleBytes); err != nil {
			sess.lg.Warn("build the continuation preamble", events.LogKeyErr, err)
		}
	}
	if forkPreamble != "" {
		sess.preamble = forkPreamble // the source's history, not the fork's own (fork.go)
	}
	svc.m.attachSeconds.WithLabelValues(tier).Observe(time.Since(start).Seconds())
	if tier != events.TierNew {
		svc.m.restores.WithLabelValues(tier).Inc()
	}
	sess.lg.Info("adapter attached", events.LogKeyRunner, string(runner), events.LogKeyProcess, r.processID, "tier", tier, "tier_reason", reason)
	return runner, nil
}

// startAdapter asks the route's runner for its adapter: a new ACP session
// for a session that never had one, else the restore ladder for the ACP
// session it had.
func (r *route) startAdapter(ctx context.Context) (tier, reason string, _ *events.AcpSessionCreatedResponse, _ error) {
	sess, runner := r.sess, r.runner
	o := sess.opened
	var dirs []string
	var env map[string]string
	if len(o.AdditionalDirectories) > 0 {
		_ = json.Unmarshal(o.AdditionalDirectories, &dirs)
	}
	if len(o.Env) > 0 {
		_ = json.Unmarshal(o.Env, &env)
	}
	mcp := o.McpServers
	if len(mcp) == 0 {
		mcp = events.JSON("[]")
	}
	if prev := sess.meta.AcpSessionID; prev != "" {
		// The instruction settings go with every restore, as with the
		// create: the agent is given its instructions again.
		ready, err := rpc.Call[events.AdapterReady](ctx, sess.svc.nc, events.RunnerSubject(runner, events.RunnerRestore), &events.RestoreRequest{
			Resume: events.AcpResumeSessionRequest{
				SessionID: prev, AgentType: o.Agent, Cwd: o.Cwd, AdditionalDirectories: dirs, McpServers: mcp, Env: env,
			},
			SkipOsInstructions: o.SkipOsInstructions, AdditionalInstructions: o.AdditionalInstructions,
			ClientCapabilities: sess.clientCapabilities(),
		}, r.header())
		if err != nil {
			return "", "", nil, err
		}
		return ready.Tier, ready.Reason, &ready.Session, nil
	}
	created, err := rpc.Call[events.AcpSessionCreatedResponse](ctx, sess.svc.nc, events.RunnerSubject(runner, events.RunnerCreate), &events.AcpCreateSessionRequest{
		AgentType: o.Agent, Cwd: o.Cwd, ProtocolVersion: 1, McpServers: mcp, Env: env, AdditionalDirectories: dirs,
		SkipOsInstructions: o.SkipOsInstructions, AdditionalInstructions: o.AdditionalInstructions,
		ClientCapabilities: sess.clientCapabilities(),
	}, r.header())
	return events.TierNew, "", created, err
}

func (r *route) header() nats.Header {
	sess := r.sess
	return nats.Header{
		events.HeaderNamespace: []string{string(sess.ns)},
		events.HeaderSessionID: []string{string(sess.sid)},
		events.HeaderProcessID: []string{r.processID},
	}
}

// detach forgets the adapter route and stops consuming its output.
func (sess *session) detach() {
	if sess.adapter == nil {
		return
	}
	sess.adapter.endDrain()
	sess.adapter.stopGap()
	_ = sess.adapter.sub.Unsubscribe()
	sess.adapter = nil
	sess.moved(onDetach)
}

// stopAdapter detaches and asks the runner to stop the process.
// Stopping is cleanup: it goes on, within CallTimeout, however ctx ends.
func (r *route) stopAdapter(ctx context.Context) {
	sess := r.sess
	sess.detach()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sess.svc.cfg.CallTimeout)
	defer cancel()
	if _, err := rpc.Call[events.RunnerAck](ctx, sess.svc.nc, events.RunnerSubject(r.runner, events.RunnerStop), &events.AcpCloseSessionRequest{SessionID: r.acpSessionID}, r.header()); err != nil {
		sess.lg.Warn("stop adapter", events.LogKeyErr, err)
	}
}
