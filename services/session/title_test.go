package session_test

import (
	"context"
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session"
)

func (h *harness) rename(ctx context.Context, sid, title string) (*events.RenameSessionResponse, error) {
	return rpc.Call[events.RenameSessionResponse](ctx, h.nc, events.APISubject("default", events.OpRenameSession),
		&events.RenameSessionRequest{SessionID: &sid, Title: title}, nil)
}

// getSession reads sid as a client does after a prompt returns: from the
// history service.
func (h *harness) getSession(t *testing.T, sid string) events.AcpDurableSessionInfo {
	t.Helper()
	resp, err := rpc.Call[events.AcpGetDurableSessionResponse](t.Context(), h.nc, events.APISubject("default", events.OpGetSession),
		&events.AcpGetDurableSessionRequest{SessionID: &sid}, nil)
	if err != nil {
		t.Fatalf("getSession %s: %v", sid, err)
	}
	return resp.Session
}

// wantTitle checks sid's title as getSession shows it ("": none).
func (h *harness) wantTitle(t *testing.T, sid, want string) {
	t.Helper()
	var got string
	if title := h.getSession(t, sid).Title; title != nil {
		got = *title
		if got == "" {
			t.Errorf("getSession(%s).title is an empty string, want it absent", sid)
		}
	}
	if got != want {
		t.Errorf("getSession(%s).title = %q, want %q", sid, got, want)
	}
}

// titleRecords returns sid's TitleChanged records, oldest first.
func (h *harness) titleRecords(t *testing.T, sid string) []*events.TitleChanged {
	t.Helper()
	recs, err := eventlog.Forward(t.Context(), h.js, events.StreamLog, events.TitleSubject("default", events.SessionID(sid)), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*events.TitleChanged, 0, len(recs))
	for _, r := range recs {
		tc, err := events.Decode[events.TitleChanged](r.Data)
		if err != nil {
			t.Fatalf("title record %d: %v", r.Sequence, err)
		}
		out = append(out, tc)
	}
	return out
}

func (h *harness) mustPrompt(t *testing.T, sid, script string) {
	t.Helper()
	if _, err := h.prompt(t.Context(), sid, "", script); err != nil {
		t.Fatalf("prompt %q: %v", script, err)
	}
}

// A session without a title takes one from its first user message with
// text: white space collapsed, at most 80 runes, then "…". Later messages
// change nothing.
func TestTitleDerivedFromFirstMessage(t *testing.T) {
	h := startRig(t, session.Config{})
	long := strings.Repeat("日本語 ", 30) // 120 runes, 3-byte each but the spaces
	for _, tc := range []struct {
		name, first, want string
	}{
		{"collapsed", "  Please\n\n fix   the\tbuild  ", "Please fix the build"},
		{"cut at 80 runes", long, strings.TrimSpace(strings.Repeat("日本語 ", 20)) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := "derived-" + strings.ReplaceAll(tc.name, " ", "-")
			if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
				t.Fatal(err)
			}
			h.wantTitle(t, sid, "")
			h.mustPrompt(t, sid, tc.first)
			h.wantTitle(t, sid, tc.want)
			h.mustPrompt(t, sid, "say something else entirely")
			h.wantTitle(t, sid, tc.want)
			if got := h.titleRecords(t, sid); len(got) != 1 || got[0].Source != events.TitleFromMessage || got[0].Title != tc.want {
				t.Errorf("title records = %+v, want one from the message", got)
			}
			h.readLog(t, sid)
		})
	}
}

// The agent's session_info_update title replaces a derived title and an
// earlier agent title; a null title, or none, changes nothing.
func TestAgentTitleOverridesDerived(t *testing.T) {
	h := startRig(t, session.Config{})
	const sid = "agent-title"
	if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	h.mustPrompt(t, sid, "say hello\ntitle Refactor the parser")
	h.wantTitle(t, sid, "Refactor the parser")
	h.mustPrompt(t, sid, `update {"sessionUpdate":"session_info_update","title":"  Second\ntitle  "}`)
	h.wantTitle(t, sid, "Second title")
	h.mustPrompt(t, sid, `update {"sessionUpdate":"session_info_update","title":null}`+"\n"+
		`update {"sessionUpdate":"session_info_update","updatedAt":"2026-12-01T00:00:00Z"}`+"\n"+
		"title Second title")
	h.wantTitle(t, sid, "Second title")
	var sources []string
	for _, tc := range h.titleRecords(t, sid) {
		sources = append(sources, tc.Source+":"+tc.Title)
	}
	want := []string{"message:say hello title Refactor the parser", "agent:Refactor the parser", "agent:Second title"}
	if strings.Join(sources, "|") != strings.Join(want, "|") {
		t.Errorf("title records = %q, want %q", sources, want)
	}
	h.readLog(t, sid)
}

// A rename replaces any title, and from then on the agent's titles do not;
// another rename does. The answer is the session, renamed.
func TestRenameOverridesAgentTitle(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	const sid = "renamed"
	if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	h.mustPrompt(t, sid, "title From the agent")
	h.wantTitle(t, sid, "From the agent")
	resp, err := h.rename(ctx, sid, "  My own  title ")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Session.SessionID != sid || resp.Session.Title == nil || *resp.Session.Title != "My own  title" {
		t.Errorf("rename answered %+v, want session %s titled %q", resp.Session, sid, "My own  title")
	}
	if got := h.getSession(t, sid); got.LatestSequence != resp.Session.LatestSequence {
		t.Errorf("rename's latestSequence = %d, getSession's %d", resp.Session.LatestSequence, got.LatestSequence)
	}
	h.wantTitle(t, sid, "My own  title")
	h.mustPrompt(t, sid, "title The agent again")
	h.wantTitle(t, sid, "My own  title")
	if _, err := h.rename(ctx, sid, "Renamed twice"); err != nil {
		t.Fatal(err)
	}
	h.mustPrompt(t, sid, "title And again")
	h.wantTitle(t, sid, "Renamed twice")
	// The same rename again writes nothing.
	before, err := h.lastSeq(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.rename(ctx, sid, "Renamed twice"); err != nil {
		t.Fatal(err)
	}
	if after, err := h.lastSeq(ctx, sid); err != nil || after != before {
		t.Errorf("repeating a rename moved the log from %d to %d (%v)", before, after, err)
	}
	h.readLog(t, sid)
}

// A title that breaks the rules is invalid_request and writes nothing; a
// session that does not exist is session_not_found.
func TestRenameRejects(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	const sid = "strict"
	if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	before, err := h.lastSeq(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	for _, title := range []string{"", "  \t\n ", strings.Repeat("é", events.MaxTitleRunes+1), "a\nb", "bell\a", "a\x00b", "a\u0085b", "a\xffb", "\xc3"} {
		if _, err := h.rename(ctx, sid, title); code(err) != events.CodeInvalidRequest {
			t.Errorf("rename to %q = %v, want %s", title, err, events.CodeInvalidRequest)
		}
	}
	if after, err := h.lastSeq(ctx, sid); err != nil || after != before {
		t.Errorf("rejected renames moved the log from %d to %d (%v)", before, after, err)
	}
	h.wantTitle(t, sid, "")
	if _, err := h.rename(ctx, "nobody", "A title"); code(err) != events.CodeSessionNotFound {
		t.Errorf("rename of a session never opened = %v, want %s", err, events.CodeSessionNotFound)
	}
	if err := h.delete(ctx, sid); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rename(ctx, sid, "A title"); code(err) != events.CodeSessionNotFound {
		t.Errorf("rename of a deleted session = %v, want %s", err, events.CodeSessionNotFound)
	}
}

// Renaming an unloaded session, even one no replica holds, starts no
// adapter: it is read from the log, renamed, and stays unloaded.
func TestRenameUnloadedSession(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	const sid = "asleep"
	if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	h.mustPrompt(t, sid, "say hi")
	h.unload(t, sid)
	for _, fresh := range []bool{false, true} {
		if fresh {
			h.stopSvc()
			h.startSession()
		}
		attached, err := h.countCtl(ctx, sid, events.RecordAdapterAttached)
		if err != nil {
			t.Fatal(err)
		}
		title := "Asleep, fresh replica " + map[bool]string{false: "no", true: "yes"}[fresh]
		if _, err := h.rename(ctx, sid, title); err != nil {
			t.Fatal(err)
		}
		h.wantTitle(t, sid, title)
		if n, err := h.countCtl(ctx, sid, events.RecordAdapterAttached); err != nil || n != attached {
			t.Errorf("rename attached an adapter: %d AdapterAttached records, want %d (%v)", n, attached, err)
		}
		if st := string(h.getSession(t, sid).State); !strings.Contains(st, `"idle"`) {
			t.Errorf("state after the rename = %s, want idle", st)
		}
	}
	h.readLog(t, sid)
}

// The title lives in the log: a session whose ACP_SESSIONS projection is
// lost gets it back from its TitleChanged record, with its source, so that
// neither a new message nor the agent replaces a rename.
func TestTitleSurvivesLostProjection(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	const sid = "kept"
	if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	h.mustPrompt(t, sid, "title From the agent")
	if _, err := h.rename(ctx, sid, "Kept title"); err != nil {
		t.Fatal(err)
	}
	h.stopSvc()
	kv, err := h.js.KeyValue(ctx, events.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, events.SessionKey("default", sid)); err != nil {
		t.Fatal(err)
	}
	h.startSession()
	// The next prompt is served by the new owner, which rebuilt the session
	// from the log and projects it again.
	h.mustPrompt(t, sid, "say hello again")
	h.wantTitle(t, sid, "Kept title")
	h.mustPrompt(t, sid, "title The agent tries")
	h.wantTitle(t, sid, "Kept title")
	h.readLog(t, sid)
}

// A title is shown to people: characters that hide or reorder text once
// made one read as another ("invoice\u202Efdp.exe" shows as
// "invoiceexe.pdf"). An agent's titles, and titles derived from a message,
// are stored without them; a rename with one is invalid_request. A joiner
// of two pictographs hides nothing and stays.
func TestSecurityTitlesHideNoText(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	const sid = "hidden-title"
	if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	h.mustPrompt(t, sid, "say ad\u200bmin\u2066 log\u2069")
	h.wantTitle(t, sid, "say admin log")
	for script, want := range map[string]string{
		`update {"sessionUpdate":"session_info_update","title":"invoice\u202efdp.exe"}`:                                   "invoicefdp.exe",
		`update {"sessionUpdate":"session_info_update","title":"\ufeffpay\u200dpal\u2060 \u3164\u00ad"}`:                  "paypal",
		`update {"sessionUpdate":"session_info_update","title":"\u200f\u061c\u200e\u202a\ud83d\udc69\u200d\ud83d\udcbb"}`: "👩‍💻",
	} {
		h.mustPrompt(t, sid, script)
		h.wantTitle(t, sid, want)
	}
	before, err := h.lastSeq(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	for _, title := range []string{"invoice\u202efdp.exe", "ad\u200bmin", "\ufeffx", "a\u2066b", "x\U000E0041"} {
		if _, err := h.rename(ctx, sid, title); code(err) != events.CodeInvalidRequest {
			t.Errorf("rename to %q = %v, want %s", title, err, events.CodeInvalidRequest)
		}
	}
	if after, err := h.lastSeq(ctx, sid); err != nil || after != before {
		t.Errorf("refused renames moved the log from %d to %d (%v)", before, after, err)
	}
	if _, err := h.rename(ctx, sid, "👩‍💻 at work"); err != nil {
		t.Errorf("rename to a joined emoji = %v, want it accepted", err)
	}
}
