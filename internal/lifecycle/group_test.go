package lifecycle_test

import (
	"sync/atomic"
	"testing"

	"skein.dev/internal/lifecycle"
)

// TestGroupClose: Close returns only after the work running has ended,
// and no work starts after it.
func TestGroupClose(t *testing.T) {
	var g lifecycle.Group
	entered, release := make(chan struct{}), make(chan struct{})
	var ended atomic.Int32
	if !g.Go(func() {
		close(entered)
		<-release
		ended.Add(1)
	}) {
		t.Fatal("Go on an open group = false, want true")
	}
	<-entered
	doing := make(chan struct{})
	go func() {
		g.Do(func() {
			close(doing)
			<-release
			ended.Add(1)
		})
	}()
	<-doing
	closed := make(chan struct{})
	go func() {
		g.Close()
		close(closed)
	}()
	close(release)
	<-closed
	if n := ended.Load(); n != 2 {
		t.Errorf("work ended before Close returned = %d, want 2", n)
	}
	if g.Go(func() { t.Error("Go ran f after Close") }) {
		t.Error("Go after Close = true, want false")
	}
	if g.Do(func() { t.Error("Do ran f after Close") }) {
		t.Error("Do after Close = true, want false")
	}
	g.Close() // a second Close returns at once
}
