package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
)

// runnerDirectory mirrors ACP_RUNNERS: which runners are alive, what agents
// they have and how loaded they are. A watch keeps it current; a miss
// re-reads the bucket before giving up, so a runner that has just started is
// found.
type runnerDirectory struct {
	kv jetstream.KeyValue
	lg *slog.Logger

	mu      sync.Mutex
	runners map[string]*events.RunnerInfo

	// gone is called, outside the lock, when a runner's heartbeat is
	// deleted or expires.
	gone func(id events.RunnerID)
	// m, when set, is told how many runners there are and how much room
	// they have after each change.
	m *metrics
}

// watchRunners returns a directory kept current by a watch that runs, in
// bg, until ctx is done.
func watchRunners(ctx context.Context, bg *sync.WaitGroup, kv jetstream.KeyValue, lg *slog.Logger, m *metrics, gone func(events.RunnerID)) (*runnerDirectory, error) {
	d := &runnerDirectory{kv: kv, lg: lg, runners: map[string]*events.RunnerInfo{}, gone: gone, m: m}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch runners: %w", err)
	}
	bg.Go(func() { follow(ctx, w, d.apply) })
	return d, nil
}

func (d *runnerDirectory) apply(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		d.mu.Lock()
		delete(d.runners, e.Key())
		d.counted()
		d.mu.Unlock()
		if d.gone != nil {
			d.gone(events.RunnerID(e.Key()))
		}
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	info, err := events.Decode[events.RunnerInfo](e.Value())
	if err != nil {
		d.lg.Warn("undecodable runner heartbeat", "key", e.Key(), events.LogKeyErr, err)
		return
	}
	d.runners[e.Key()] = info
	d.counted()
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
		d.apply(e)
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
// one more adapter.
func (d *runnerDirectory) place(ctx context.Context, agent string) (events.RunnerID, error) {
	id, err := d.pick(agent)
	if err == nil {
		return id, nil
	}
	if rerr := d.refresh(ctx); rerr != nil {
		return "", events.Errorf(events.CodeUnavailable, "read runners: %v", rerr)
	}
	return d.pick(agent)
}

func (d *runnerDirectory) pick(agent string) (events.RunnerID, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var best *events.RunnerInfo
	var knownBy []string // runners that list the agent without its command
	var full []string    // runners with the agent installed and no room: "id (load of capacity)"
	var command string
	installed := false
	for _, r := range d.runners {
		for _, a := range r.Agents {
			if a.ID != agent {
				continue
			}
			if !a.Installed {
				knownBy, command = append(knownBy, r.ID), a.AdapterEntrypoint
				continue
			}
			installed = true
			if r.Load >= r.Capacity {
				full = append(full, fmt.Sprintf("%s (%d of %d adapters)", r.ID, r.Load, r.Capacity))
				continue
			}
			if best == nil || float64(r.Load)/float64(r.Capacity) < float64(best.Load)/float64(best.Capacity) {
				best = r
			}
		}
	}
	switch {
	case best != nil:
		best.Load++ // until its next heartbeat says otherwise
		return events.RunnerID(best.ID), nil
	case installed:
		slices.Sort(full)
		return "", events.Errorf(events.CodeAgentUnavailable, "no runner with agent %q has room: runners full: %s", agent, strings.Join(full, ", "))
	case len(knownBy) > 0:
		slices.Sort(knownBy)
		return "", events.Errorf(events.CodeAgentNotInstalled, "agent %q is not installed: its command %q does not resolve on runner %s",
			agent, command, strings.Join(knownBy, ", "))
	case len(d.runners) == 0:
		return "", events.Errorf(events.CodeAgentUnavailable, "no adapter-runner is alive")
	default:
		return "", events.Errorf(events.CodeUnknownAgent, "no runner knows agent %q", agent)
	}
}

// forget drops a runner until its next heartbeat, after it failed to answer.
func (d *runnerDirectory) forget(id events.RunnerID) {
	d.mu.Lock()
	delete(d.runners, string(id))
	d.counted()
	d.mu.Unlock()
}
