package adapterrunner

import (
	"sync"
	"sync/atomic"
)

// Uploads returns how many uploads are in progress on the runner.
func (r *Runner) Uploads() int { return r.files.inProgress() }

// FileOpsInFlight returns how many file ops hold a slot.
func (r *Runner) FileOpsInFlight() int { return r.files.ops.inFlight() }

// HoldFileOps makes every file op wait until release is called: a file
// system that does not answer, for as long as a test needs one. held
// returns how many ops wait.
func (r *Runner) HoldFileOps() (held func() int, release func()) {
	var n atomic.Int64
	stop := make(chan struct{})
	hook := func() {
		n.Add(1)
		defer n.Add(-1)
		<-stop
	}
	r.files.ops.hook.Store(&hook)
	return func() int { return int(n.Load()) }, sync.OnceFunc(func() {
		r.files.ops.hook.Store(nil)
		close(stop)
	})
}
