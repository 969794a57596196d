package session_test

import (
	"fmt"
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/services/session"
)

// An answer with an option the request does not offer is refused with a
// message that names a few of the offered ones, however many the agent
// offered and however long their IDs: 2,000 options of 100 bytes once made
// a 200 KB error.
func TestSecurityInvalidOptionMessageIsBounded(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	if err := h.open(t, "many", events.AcpOpenSessionRequest{PermissionPolicy: new(events.PolicyAsk)}); err != nil {
		t.Fatal(err)
	}
	opts := make([]string, 2000)
	for i := range opts {
		opts[i] = fmt.Sprintf("allow_once=%04d%s", i, strings.Repeat("x", 96))
	}
	done := h.promptAsync(ctx, "many", "", "permission call_1 "+strings.Join(opts, ",")+"\nsay after")
	_, req, err := h.waitPermissionRequest(ctx, "many", 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.respondPermission(ctx, "many", req.RequestID, "no-such-option-"+strings.Repeat("y", 1000))
	e := events.AsError(err)
	if e == nil || e.Code != events.CodeInvalidPermissionOption {
		t.Fatalf("respond with an invalid option = %v, want %s", err, events.CodeInvalidPermissionOption)
	}
	if len(e.Message) > 1024 || !strings.Contains(e.Message, "0000") || !strings.Contains(e.Message, "1992 more") {
		t.Errorf("message of %d bytes: %.300s…; want at most 1 KiB naming the first options and how many more", len(e.Message), e.Message)
	}
	if _, err := h.respondPermission(ctx, "many", req.RequestID, opts[0][len("allow_once="):]); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
}
