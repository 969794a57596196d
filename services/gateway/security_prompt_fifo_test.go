package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"skein.dev/pkg/events"
)

// The agent turns an attachment into a FIFO and its user prompts naming
// it: that prompt is answered (the agent gets a link to what it made), and
// another session's prompt on the same runner, sent after it, is
// answered too. Before, the runner's one-at-a-time prompt handler blocked
// in open(), and every session's prompts failed.
func TestSecurityPromptFIFOAttachmentOverHTTP(t *testing.T) {
	e := newEnv(t)
	evilDir, bobDir := e.backend.WorkDir("evil"), e.backend.WorkDir("bob")
	for sid, dir := range map[string]string{"evil": evilDir, "bob": bobDir} {
		if r := e.do(http.MethodPut, "/v1/sessions/"+sid, fmt.Sprintf(`{"agent":"demo","cwd":%q}`, dir)); r.status != http.StatusOK {
			t.Fatalf("open %s = %d %s", sid, r.status, r.body)
		}
	}
	fifo := filepath.Join(evilDir, events.AttachmentDir, "evil.txt")
	if err := os.MkdirAll(filepath.Dir(fifo), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // lets go of whatever waits in an open of it
		if fd, err := syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			syscall.Close(fd)
		}
	})
	prompt := func(sid, content string) (int, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/sessions/"+sid+"/prompt", strings.NewReader(`{"content":`+content+`}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := e.client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	status, body := prompt("evil", `[{"type":"text","text":"look"},{"type":"resource_link","uri":"skein-attachment:evil.txt","name":"evil.txt"}]`)
	if status != http.StatusOK || !strings.Contains(body, "end_turn") {
		t.Errorf("the prompt naming a FIFO = %d %s, want it answered", status, body)
	}
	status, body = prompt("bob", `[{"type":"text","text":"hi"}]`)
	if status != http.StatusOK || !strings.Contains(body, "end_turn") {
		t.Errorf("bob's prompt after it = %d %s, want it answered", status, body)
	}
}
