package gateway

import (
	"testing"
	"time"
)

// The waits of an address failing authentication: none for the free
// failures, then doubling from authBackoffFirst up to the maximum; an
// address quiet for authForget starts over, and addresses are apart.
func TestAuthBackoff(t *testing.T) {
	b := newAuthBackoff(2, time.Second)
	t0 := time.Unix(1_000_000, 0)
	var waits []time.Duration
	for i := range 7 {
		b.failed("a", t0)
		waits = append(waits, b.wait("a", t0))
		if i == 0 && b.wait("b", t0) != 0 {
			t.Error("another address waits")
		}
	}
	want := []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits after each failure = %v, want %v", waits, want)
		}
	}
	if w := b.wait("a", t0.Add(time.Second)); w != 0 {
		t.Errorf("wait once it passed = %v, want 0", w)
	}
	later := t0.Add(authForget + time.Second)
	b.failed("a", later)
	if w := b.wait("a", later); w != 0 {
		t.Errorf("wait after a quiet authForget and one failure = %v, want 0: it starts over", w)
	}
}
