package gateway

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := newLimiter(&Config{RateLimit: 1, RateBurst: 2, MaxStreams: 2, MaxWaitingPrompts: 1})
	t0 := time.Unix(1_000_000, 0)

	// The rate: a burst of 2, then one a second.
	for i := range 2 {
		if _, _, ok := l.admit("p", holdNone, t0); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	if _, wait, ok := l.admit("p", holdNone, t0); ok || wait <= 0 || wait > time.Second {
		t.Errorf("a request past the burst = ok %v, wait %v; want refused, wait up to 1s", ok, wait)
	}
	if _, _, ok := l.admit("q", holdNone, t0); !ok {
		t.Error("another principal's request refused: limits are per principal")
	}
	if _, _, ok := l.admit("p", holdNone, t0.Add(time.Second)); !ok {
		t.Error("a request a second later refused")
	}

	// What is held open: streams and prompts, each with its own cap.
	l = newLimiter(&Config{RateLimit: 1, RateBurst: 100, MaxStreams: 2, MaxWaitingPrompts: 1})
	t1 := t0
	s1, _, ok1 := l.admit("p", holdStream, t1)
	_, _, ok2 := l.admit("p", holdStream, t1)
	if !ok1 || !ok2 {
		t.Fatal("two streams refused, the cap is 2")
	}
	if _, wait, ok := l.admit("p", holdStream, t1); ok || wait != holdRetry {
		t.Errorf("a third stream = ok %v, wait %v; want refused, wait %v", ok, wait, holdRetry)
	}
	if _, _, ok := l.admit("p", holdPrompt, t1); !ok {
		t.Error("a prompt refused while streams are at their cap")
	}
	s1()
	s1() // releasing twice gives back one place
	if _, _, ok := l.admit("p", holdStream, t1.Add(time.Second)); !ok {
		t.Error("a stream refused after one closed")
	}
	if _, _, ok := l.admit("p", holdStream, t1.Add(2*time.Second)); ok {
		t.Error("a stream admitted past the cap: a double release gave back two places")
	}
}
