// Package lifecycle holds what every Skein service uses to own the work
// it starts: a Run returns only after everything it started has ended
// (STYLE R2), and work that arrives once its owner stops is refused, not
// started behind the owner's back.
package lifecycle

import "sync"

// Group is a set of goroutines and calls that one owner waits for. Once
// closed, it starts no more: a sync.WaitGroup alone must not be added to
// while it is waited on from zero, and work that arrives as the owner
// stops (a request, a timer, a callback) would otherwise run after it.
// The zero Group is ready to use.
type Group struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Go runs f in a goroutine of g, unless g is closed; it reports whether f
// runs.
func (g *Group) Go(f func()) bool {
	if !g.enter() {
		return false
	}
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}

// Do calls f now, in the caller's goroutine, as work of g, unless g is
// closed; it reports whether f ran.
func (g *Group) Do(f func()) bool {
	if !g.enter() {
		return false
	}
	defer g.wg.Done()
	f()
	return true
}

// enter counts one more piece of work, unless g is closed. The Add
// happens under mu while closed is false, hence before Close's Wait.
func (g *Group) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

// Close starts no more work and waits for the work running to end. It
// may be called more than once, and from more than one goroutine.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}
