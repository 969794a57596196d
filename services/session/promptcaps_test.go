package session_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"skein.dev/pkg/client/turnwait"
	"skein.dev/pkg/events"
	"skein.dev/services/session"
)

// Content blocks of each type ACP defines, as a client sends them.
const (
	imageBlock    = `{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}`
	audioBlock    = `{"type":"audio","data":"UklGRiQAAABXQVZF","mimeType":"audio/wav"}`
	resourceBlock = `{"type":"resource","resource":{"uri":"file:///notes/a.txt","mimeType":"text/plain","text":"a note"}}`
	linkBlock     = `{"type":"resource_link","uri":"file:///notes/b.txt","name":"b.txt"}`
)

// unadvertised are the blocks an agent takes only when it advertised the
// promptCapabilities member named.
var unadvertised = []struct{ block, capability string }{
	{imageBlock, "image"},
	{audioBlock, "audio"},
	{resourceBlock, "embeddedContext"},
}

// textBlock is a text block of s.
func textBlock(s string) string {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": s})
	return string(b)
}

// promptOf sends a prompt of blocks to sid as the Go client does
// (turnwait.Prompt, on NATS) and waits for the turn's end.
func (h *harness) promptOf(t *testing.T, sid string, blocks ...string) (*events.AcpPromptResponse, error) {
	t.Helper()
	req := &events.AcpPromptRequest{SessionID: &sid, Content: events.JSON("[" + strings.Join(blocks, ",") + "]")}
	return turnwait.Prompt(t.Context(), h.js, "default", req)
}

// wantUnsupported checks that err refuses block content[i] with
// unsupported_content naming the capability.
func wantUnsupported(t *testing.T, err error, i int, capability string) {
	t.Helper()
	e := events.AsError(err)
	if err == nil || e.Code != events.CodeUnsupportedContent || !strings.HasPrefix(e.Message, fmt.Sprintf("content[%d]: ", i)) ||
		!strings.HasSuffix(e.Message, "(promptCapabilities."+capability+")") {
		t.Errorf("prompt = %v, want %s for content[%d] naming promptCapabilities.%s", err, events.CodeUnsupportedContent, i, capability)
	}
}

// agentReport returns the text of a turn's last agent message: what the
// test agent's blocks command reported of the blocks it got.
func agentReport(t *testing.T, res *events.AcpPromptResponse) string {
	t.Helper()
	var u update
	if err := json.Unmarshal(res.Message, &u); err != nil {
		t.Fatalf("the turn's message %s: %v", res.Message, err)
	}
	return u.Content.Text
}

// TestPromptContentByCapabilities: a prompt with an image, audio or
// embedded resource block, to a session whose agent did not advertise the
// prompt capability, is refused with unsupported_content naming it, and
// records nothing: no user message, no turn, no title, the session's
// state and log as they were. Text and resource_link blocks always go,
// and the refused blocks reach an agent that advertised them, as sent.
func TestPromptContentByCapabilities(t *testing.T) {
	h := startRig(t, session.Config{})
	if err := h.open(t, "s1", events.AcpOpenSessionRequest{Agent: "textonly"}); err != nil {
		t.Fatal(err)
	}
	before, seq := h.getSession(t, "s1"), h.last(t, "s1")
	for _, tc := range unadvertised {
		_, err := h.promptOf(t, "s1", textBlock("describe this"), tc.block)
		wantUnsupported(t, err, 1, tc.capability)
	}
	after := h.getSession(t, "s1")
	if string(after.State) != string(before.State) || after.Title != nil || h.last(t, "s1") != seq {
		t.Errorf("after the refusals the session is %s, title %v, its log at %d; want %s, no title, the log at %d",
			after.State, after.Title, h.last(t, "s1"), before.State, seq)
	}
	log, evs := h.readLog(t, "s1")
	if len(log.Turns) != 0 || len(evs) != 0 {
		t.Errorf("after the refusals the log holds %d turns and %d events, want none", len(log.Turns), len(evs))
	}

	// Text and resource_link blocks reach the agent.
	res, err := h.promptOf(t, "s1", textBlock("blocks"), linkBlock)
	if err != nil {
		t.Fatal(err)
	}
	if got := agentReport(t, res); !strings.Contains(got, `"type":"resource_link"`) || strings.Count(got, "block ") != 1 {
		t.Errorf("the agent reported %q, want the resource_link", got)
	}
	if _, evs := h.readLog(t, "s1"); userText(evs, evs[0].turnID) != "blocks" {
		t.Errorf("the accepted prompt's user message is %q, want its text", userText(evs, evs[0].turnID))
	}

	// An agent that advertised all three takes them all.
	if err := h.open(t, "s2", events.AcpOpenSessionRequest{Agent: "test"}); err != nil {
		t.Fatal(err)
	}
	res, err = h.promptOf(t, "s2", textBlock("blocks"), imageBlock, audioBlock, resourceBlock, linkBlock)
	if err != nil {
		t.Fatal(err)
	}
	got := agentReport(t, res)
	for _, typ := range []string{"image", "audio", "resource", "resource_link"} {
		if !strings.Contains(got, `{"type":"`+typ+`",`) {
			t.Errorf("the agent reported %q, want a %s block", got, typ)
		}
	}
}

// last returns the sequence of sid's newest record.
func (h *harness) last(t *testing.T, sid string) uint64 {
	t.Helper()
	seq, err := h.lastSeq(t.Context(), sid)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// TestPromptContentOfTheNextAdapter: a prompt to a session without an
// adapter (unloaded, or a fork's first) is checked against what the
// adapter it starts advertises, before anything of it is recorded: a fork
// has no capabilities cached until then, and is not refused for that.
func TestPromptContentOfTheNextAdapter(t *testing.T) {
	h := startRig(t, session.Config{})
	for _, agent := range []string{"textonly", "test"} {
		if err := h.open(t, agent, events.AcpOpenSessionRequest{Agent: agent}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.prompt(t.Context(), agent, "", "say first"); err != nil {
			t.Fatal(err)
		}
		if _, err := h.fork(t.Context(), agent, agent+"-fork", nil); err != nil {
			t.Fatal(err)
		}
	}
	h.unload(t, "textonly")
	for _, sid := range []string{"textonly", "textonly-fork"} {
		log, _ := h.readLog(t, sid)
		_, err := h.promptOf(t, sid, textBlock("describe this"), imageBlock)
		wantUnsupported(t, err, 1, "image")
		if after, _ := h.readLog(t, sid); len(after.Turns) != len(log.Turns) || len(after.Events) != len(log.Events) {
			t.Errorf("%s: the refused prompt left %d turns and %d events, want %d and %d", sid, len(after.Turns), len(after.Events), len(log.Turns), len(log.Events))
		}
	}
	// The test agent refuses a block it did not advertise: a turn that
	// ends well is one whose agent took the image.
	if _, err := h.promptOf(t, "test-fork", textBlock("say seen"), imageBlock); err != nil {
		t.Fatalf("an image to the fork of an agent that takes images: %v", err)
	}
	_, evs := h.readLog(t, "test-fork")
	if n := len(evs); n < 2 || evs[n-2].upd == nil || evs[n-2].upd.Content.Type != "image" {
		t.Errorf("the fork's log does not end with the image and the answer")
	}
}
