package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"skein.dev/internal/stacktest"
	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
)

// TestPromptContentByCapabilities: over HTTP, a prompt with an image,
// audio or embedded resource block to a session whose agent did not
// advertise the prompt capability is 400 unsupported_content naming it,
// and nothing is recorded: the history holds no user message, the session
// stays idle and untitled. Text and resource_link blocks always go (an
// upload, too, as a file:// link: the agent takes no embedded context),
// and an agent that advertised all three takes the blocks refused above.
func TestPromptContentByCapabilities(t *testing.T) {
	e := newEnv(t, func(o *envOptions) {
		o.backend = append(o.backend, stacktest.WithAgents(
			adapterrunner.Agent{ID: "textonly", Command: testAgent, Args: []string{"--prompt-capabilities=none"}},
		))
	})
	const (
		text     = `{"type":"text","text":"describe this"}`
		image    = `{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}`
		audio    = `{"type":"audio","data":"UklGRiQAAABXQVZF","mimeType":"audio/wav"}`
		resource = `{"type":"resource","resource":{"uri":"file:///notes/a.txt","mimeType":"text/plain","text":"a note"}}`
		link     = `{"type":"resource_link","uri":"file:///notes/b.txt","name":"b.txt"}`
		blocks   = `{"type":"text","text":"blocks"}`
	)
	e.backend.Open("s1", "textonly")
	session := func() string {
		t.Helper()
		r := e.do(http.MethodGet, "/v1/sessions/s1", "")
		var s struct {
			State json.RawMessage `json:"state"`
			Title *string         `json:"title"`
		}
		if r.status != http.StatusOK || json.Unmarshal(r.body, &s) != nil {
			t.Fatalf("GET /v1/sessions/s1 = %d %s", r.status, r.body)
		}
		if s.Title != nil {
			t.Errorf("the session has the title %q, want none", *s.Title)
		}
		return string(s.State)
	}
	state, last := session(), e.backend.Last("s1")
	for _, tc := range []struct{ block, capability string }{
		{image, "image"},
		{audio, "audio"},
		{resource, "embeddedContext"},
	} {
		body := wantError(t, e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[`+text+`,`+tc.block+`]}`),
			http.StatusBadRequest, events.CodeUnsupportedContent)
		if want := "(promptCapabilities." + tc.capability + ")"; !strings.HasPrefix(body.Error.Message, "content[1]: ") || !strings.HasSuffix(body.Error.Message, want) {
			t.Errorf("the refusal says %q, want content[1] and %s", body.Error.Message, want)
		}
	}
	if got := session(); got != state || e.backend.Last("s1") != last {
		t.Errorf("after the refusals the session is %s, its log at %d; want %s, at %d", got, e.backend.Last("s1"), state, last)
	}
	if r := e.do(http.MethodGet, "/v1/sessions/s1/history", ""); r.status != http.StatusOK || strings.Contains(string(r.body), "user_message_chunk") {
		t.Errorf("history after the refusals = %d %s, want no user message", r.status, r.body)
	}

	// Text, a resource_link and an upload's link go; the upload reaches
	// the agent as a link to its file.
	f := uploadHTTP(t, e, "s1", "hello.txt", []byte("hello from a file"))
	upload := `{"type":"resource_link","uri":"` + events.AttachmentScheme + f.Name + `","name":"` + f.Name + `"}`
	got := agentReport(t, e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[`+blocks+`,`+link+`,`+upload+`]}`))
	if strings.Count(got, `"type":"resource_link"`) != 2 || !strings.Contains(got, `"uri":"file:///notes/b.txt"`) ||
		!strings.Contains(got, `/.skein-attachments/hello.txt"`) || strings.Contains(got, `"type":"resource",`) {
		t.Errorf("the agent got %q, want two resource_links, one to the upload's file", got)
	}

	// An agent that advertised image, audio and embeddedContext.
	e.backend.Open("s2", "demo")
	got = agentReport(t, e.do(http.MethodPost, "/v1/sessions/s2/prompt", `{"content":[`+blocks+`,`+image+`,`+audio+`,`+resource+`]}`))
	for _, typ := range []string{"image", "audio", "resource"} {
		if !strings.Contains(got, `block {"type":"`+typ+`",`) {
			t.Errorf("the agent got %q, want a %s block", got, typ)
		}
	}
}

// agentReport returns the text of the message a prompt's 200 carries:
// what the test agent's blocks command reported of the blocks it got.
func agentReport(t *testing.T, r response) string {
	t.Helper()
	var res struct {
		Message struct {
			Content struct{ Text string } `json:"content"`
		} `json:"message"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil {
		t.Fatalf("prompt = %d %s, want 200", r.status, r.body)
	}
	return res.Message.Content.Text
}
