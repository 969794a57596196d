package session_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"skein.dev/pkg/events"
)

// startPayload is start on a NATS server whose max_payload is maxPayload,
// as skein dev's (8 MiB).
func startPayload(t *testing.T, maxPayload int32) *harness {
	t.Helper()
	return start(t, func(o *server.Options) { o.MaxPayload = maxPayload })
}

// oversize prompts script, whose output breaks a limit, and checks that
// the turn fails at once with code, its message naming limit, and that
// the session takes the next prompt.
func oversize(t *testing.T, script string, code events.Code, limit string) *harness {
	h := startPayload(t, 8<<20)
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	// The bound only keeps a broken build from hanging the suite: the
	// turn ends as soon as the runner read the line.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := h.prompt(ctx, "s1", "", script)
	if e := events.AsError(err); err == nil || e.Code != code || !strings.Contains(e.Message, limit) {
		t.Fatalf("prompt = %+v, %v; want %s naming the limit %s", res, err, code, limit)
	}
	if res, err := h.prompt(ctx, "s1", "", "say again"); err != nil || !strings.Contains(string(res.Message), "again") {
		t.Errorf("next prompt = %+v, %v; want it answered", res, err)
	}
	return h
}

// TestSecurityOversizeLine: an agent line over the 16 MiB line limit
// fails the turn at once with line_too_long, instead of leaving it
// running.
func TestSecurityOversizeLine(t *testing.T) {
	h := oversize(t, "big 17000000", events.CodeLineTooLong, "16777216")
	// The adapter the runner no longer reads was stopped at once, not
	// after the cancel's grace.
	recs, err := h.ctl(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	broken := slices.ContainsFunc(recs, func(v events.Variant) bool {
		u, ok := v.(*events.SessionUnloaded)
		return ok && u.Reason == events.UnloadBroken
	})
	if !broken {
		t.Errorf("lifecycle records %v, want a SessionUnloaded{%s}", recs, events.UnloadBroken)
	}
}

// TestSecurityOverPayloadLine: an agent line under the line limit but
// over what one NATS message carries (8 MiB) fails the turn at once with
// payload_too_large, instead of ending it end_turn without the message.
func TestSecurityOverPayloadLine(t *testing.T) {
	oversize(t, "big 9000000\nsay after", events.CodePayloadTooLarge, "8388608")
}
