package adapterrunner

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/lifecycle"
	"skein.dev/pkg/events"
)

// A file op (events.RunnerFile, and the attachment reads of a prompt)
// touches a workspace that its agent controls: a file there may be a FIFO,
// a device, or lie on a file system that does not answer. Opening with
// O_NONBLOCK and refusing anything but a regular file (files.go) ends the
// first two at once; what is left is a slow file system, which no
// goroutine can interrupt in its system call. So every op runs in a slot:
//
//   - at most Config.FileOpsPerSession of one session and Config.FileOps
//     of the runner are in flight; one more is refused at once,
//     rate_limited, without waiting;
//   - the request waits for its op at most Config.FileOpTimeout, and is
//     then answered timeout; the op itself goes on in its goroutine,
//     holding its slot, until the file system answers. So the goroutines,
//     threads and descriptors that a file system that hangs can take are
//     the runner's slots, never more, and the slots come back when it
//     answers.
//
// The op goroutines belong to the runner's watchers: Run waits for them.

// Defaults of Config.FileOps, FileOpsPerSession and FileOpTimeout.
const (
	DefaultFileOps           = 64
	DefaultFileOpsPerSession = 8
	DefaultFileOpTimeout     = 5 * time.Second
)

// Causes of acp_runner_file_refusals_total, a closed set.
const (
	refusedNotRegular       = "not_regular"       // a FIFO, device, socket (or a file where a directory is meant)
	refusedBusySession      = "busy_session"      // the session's file ops in flight at their bound
	refusedBusyRunner       = "busy_runner"       // the runner's file ops in flight at their bound
	refusedTimeout          = "timeout"           // the op outlasted adapter-runner.file-op-timeout
	refusedUploadsSession   = "uploads_session"   // uploads in progress of the session at their bound
	refusedUploadsPrincipal = "uploads_principal" // of the principal
	refusedUploadsNamespace = "uploads_namespace" // of the namespace
	refusedUploadsRunner    = "uploads_runner"    // of the runner
)

var refusalCauses = []string{refusedNotRegular, refusedBusySession, refusedBusyRunner, refusedTimeout,
	refusedUploadsSession, refusedUploadsPrincipal, refusedUploadsNamespace, refusedUploadsRunner}

// fileOps holds the slots of the file ops in flight.
type fileOps struct {
	perSession int
	timeout    time.Duration
	group      *lifecycle.Group
	refusals   *prometheus.CounterVec // by cause

	slots chan struct{} // one per op in flight on the runner

	mu   sync.Mutex
	busy map[string]int // ops in flight by events.SessionKey

	// hook, set by tests only (export_test.go), runs in each op's slot
	// before the op.
	hook atomic.Pointer[func()]
}

func newFileOps(cfg Config, group *lifecycle.Group, refusals *prometheus.CounterVec) *fileOps {
	o := &fileOps{
		perSession: cfg.FileOpsPerSession,
		timeout:    cfg.FileOpTimeout,
		group:      group,
		busy:       map[string]int{},
		refusals:   refusals,
	}
	o.slots = make(chan struct{}, cfg.FileOps)
	return o
}

// refused counts one refusal of cause.
func (o *fileOps) refused(cause string) { o.refusals.WithLabelValues(cause).Inc() }

// acquire takes a slot of session key, or refuses at once.
func (o *fileOps) acquire(key string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.busy[key] >= o.perSession {
		o.refused(refusedBusySession)
		return events.Errorf(events.CodeRateLimited, "the session has %d file operations in flight, the most it may (adapter-runner.file-ops-per-session); retry", o.perSession)
	}
	select {
	case o.slots <- struct{}{}:
	default:
		o.refused(refusedBusyRunner)
		return events.Errorf(events.CodeRateLimited, "the runner has %d file operations in flight, the most it may (adapter-runner.file-ops); retry", cap(o.slots))
	}
	o.busy[key]++
	return nil
}

func (o *fileOps) release(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.busy[key]--; o.busy[key] <= 0 {
		delete(o.busy, key)
	}
	<-o.slots
}

// inFlight returns the file ops in flight on the runner.
func (o *fileOps) inFlight() int { return len(o.slots) }

// runFileOp runs op of session key in a slot of o, and returns its result,
// or a refusal: rate_limited when no slot is free, timeout once op has run
// for o.timeout (it goes on, in its slot, until it returns; its result is
// then dropped), unavailable when the runner is stopping.
func runFileOp[T any](ctx context.Context, o *fileOps, key string, op func() (T, error)) (T, error) {
	var zero T
	if err := o.acquire(key); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1) // the op never waits for its reader
	started := o.group.Go(func() {
		if hook := o.hook.Load(); hook != nil {
			(*hook)()
		}
		v, err := op()
		// The slot is free before the answer goes: a client's next op,
		// sent on this answer, finds it free.
		o.release(key)
		done <- result{v, err}
	})
	if !started {
		o.release(key)
		return zero, events.Errorf(events.CodeUnavailable, "the runner is stopping")
	}
	t := time.NewTimer(o.timeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-t.C:
		o.refused(refusedTimeout)
		return zero, events.Errorf(events.CodeTimeout, "the file operation did not end within %v (adapter-runner.file-op-timeout)", o.timeout)
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}
