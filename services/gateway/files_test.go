package gateway_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

// uploadHTTP uploads data as name to session sid through the routes, in
// the chunks begin offers, and returns the committed file.
func uploadHTTP(t *testing.T, e *env, sid, name string, data []byte) events.FileInfo {
	t.Helper()
	r := e.do(http.MethodPost, "/v1/sessions/"+sid+"/files/uploads", fmt.Sprintf(`{"name":%q,"size":%d}`, name, len(data)))
	var begun struct {
		TransferID string `json:"transferId"`
		ChunkSize  int    `json:"chunkSize"`
		MaxBytes   int64  `json:"maxBytes"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &begun) != nil {
		t.Fatalf("begin = %d %s", r.status, r.body)
	}
	if begun.ChunkSize <= 0 || int64(begun.ChunkSize) > events.FileChunkSize(e.nc.MaxPayload()) {
		t.Fatalf("chunkSize %d; the connection carries %d", begun.ChunkSize, e.nc.MaxPayload())
	}
	for off := 0; off < len(data); off += begun.ChunkSize {
		end := min(off+begun.ChunkSize, len(data))
		r := e.do(http.MethodPut, "/v1/sessions/"+sid+"/files/uploads/"+begun.TransferID, chunkJSON(off, data[off:end]))
		if r.status != http.StatusOK || string(r.body) != fmt.Sprintf(`{"offset":%d}`, end) {
			t.Fatalf("chunk at %d = %d %s", off, r.status, r.body)
		}
	}
	r = e.do(http.MethodPost, "/v1/sessions/"+sid+"/files/uploads/"+begun.TransferID+"/commit", "")
	var committed struct{ File events.FileInfo }
	if r.status != http.StatusOK || json.Unmarshal(r.body, &committed) != nil {
		t.Fatalf("commit = %d %s", r.status, r.body)
	}
	return committed.File
}

func chunkJSON(off int, data []byte) string {
	return fmt.Sprintf(`{"offset":%d,"data":%q}`, off, base64.StdEncoding.EncodeToString(data))
}

// TestFilesOverHTTP: upload in several chunks (the test server's 1 MiB
// messages make them smaller than 1 MiB), list, download; the refusals
// are typed.
func TestFilesOverHTTP(t *testing.T) {
	e := newEnv(t)
	dir := e.backend.WorkDir("files")
	if r := e.do(http.MethodPut, "/v1/sessions/s1", fmt.Sprintf(`{"agent":"demo","cwd":%q}`, dir)); r.status != http.StatusOK {
		t.Fatalf("open = %d %s", r.status, r.body)
	}
	data := make([]byte, 5<<19) // 2.5 MiB: three chunks
	for i := range data {
		data[i] = byte(i * 7)
	}
	f := uploadHTTP(t, e, "s1", "data.bin", data)
	if f.Name != "data.bin" || f.Path != ".skein-attachments/data.bin" || f.Size != int64(len(data)) {
		t.Errorf("committed %+v", f)
	}
	again := uploadHTTP(t, e, "s1", "data.bin", []byte("second"))
	if again.Name != "data-2.bin" {
		t.Errorf("a second upload of data.bin landed as %q, want data-2.bin", again.Name)
	}

	r := e.do(http.MethodGet, "/v1/sessions/s1/files?path=.skein-attachments", "")
	var list struct {
		Path  string            `json:"path"`
		Files []events.FileInfo `json:"files"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &list) != nil || len(list.Files) != 2 || list.Files[0].Name != "data-2.bin" || list.Files[1].Size != int64(len(data)) {
		t.Errorf("list = %d %s", r.status, r.body)
	}
	r = e.do(http.MethodGet, "/v1/sessions/s1/files/content?path="+url.QueryEscape(f.Path), "")
	if r.status != http.StatusOK || !bytes.Equal(r.body, data) || r.header.Get("Content-Length") != strconv.Itoa(len(data)) ||
		r.header.Get("Content-Type") != "application/octet-stream" || !strings.Contains(r.header.Get("Content-Disposition"), "data.bin") {
		t.Errorf("download = %d, %d bytes, %v; want the %d uploaded", r.status, len(r.body), r.header, len(data))
	}

	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code                     events.Code
	}{
		{"path with ..", http.MethodGet, "/v1/sessions/s1/files/content?path=../x", "", http.StatusBadRequest, events.CodeInvalidRequest},
		{"absolute path", http.MethodGet, "/v1/sessions/s1/files?path=/etc", "", http.StatusBadRequest, events.CodeInvalidRequest},
		{"missing file", http.MethodGet, "/v1/sessions/s1/files/content?path=nope", "", http.StatusNotFound, events.CodeFileNotFound},
		{"unknown parameter", http.MethodGet, "/v1/sessions/s1/files?zzz=1", "", http.StatusBadRequest, events.CodeInvalidRequest},
		{"unknown session", http.MethodGet, "/v1/sessions/nope/files", "", http.StatusNotFound, events.CodeSessionNotFound},
		{"over the cap", http.MethodPost, "/v1/sessions/s1/files/uploads", fmt.Sprintf(`{"name":"x","size":%d}`, events.DefaultMaxFileBytes+1), http.StatusRequestEntityTooLarge, events.CodePayloadTooLarge},
		{"hidden name", http.MethodPost, "/v1/sessions/s1/files/uploads", `{"name":".env","size":1}`, http.StatusBadRequest, events.CodeInvalidRequest},
		{"name with a slash", http.MethodPost, "/v1/sessions/s1/files/uploads", `{"name":"a/b","size":1}`, http.StatusBadRequest, events.CodeInvalidRequest},
		{"bad transfer", http.MethodPut, "/v1/sessions/s1/files/uploads/r1.x~abc", chunkJSON(0, []byte("x")), http.StatusBadRequest, events.CodeInvalidRequest},
		{"unknown transfer", http.MethodPut, "/v1/sessions/s1/files/uploads/r1~abc", chunkJSON(0, []byte("x")), http.StatusNotFound, events.CodeFileNotFound},
	} {
		wantErrorOf(t, c.name, e.do(c.method, c.path, c.body), c.status, c.code)
	}

	// A chunk at a wrong offset, and one over the chunk size.
	r = e.do(http.MethodPost, "/v1/sessions/s1/files/uploads", `{"name":"o.bin","size":10}`)
	var begun struct{ TransferID string }
	if err := json.Unmarshal(r.body, &begun); err != nil {
		t.Fatal(err)
	}
	wantErrorOf(t, "chunk at a wrong offset", e.do(http.MethodPut, "/v1/sessions/s1/files/uploads/"+begun.TransferID, chunkJSON(3, []byte("x"))),
		http.StatusBadRequest, events.CodeInvalidRequest)
	wantErrorOf(t, "chunk over the chunk size", e.do(http.MethodPut, "/v1/sessions/s1/files/uploads/"+begun.TransferID, chunkJSON(0, make([]byte, events.MaxFileChunk))),
		http.StatusRequestEntityTooLarge, events.CodePayloadTooLarge)

	// Cancelled: the upload is over, and its bytes are gone.
	if r := e.do(http.MethodPut, "/v1/sessions/s1/files/uploads/"+begun.TransferID, chunkJSON(0, []byte("01234"))); r.status != http.StatusOK {
		t.Fatalf("chunk = %d %s", r.status, r.body)
	}
	wantErrorOf(t, "cancel with a body", e.do(http.MethodDelete, "/v1/sessions/s1/files/uploads/"+begun.TransferID, `{"force":true}`),
		http.StatusBadRequest, events.CodeInvalidRequest)
	if r := e.do(http.MethodDelete, "/v1/sessions/s1/files/uploads/"+begun.TransferID, ""); r.status != http.StatusOK || string(r.body) != "{}" {
		t.Fatalf("cancel = %d %s", r.status, r.body)
	}
	if left, err := os.ReadDir(filepath.Join(dir, events.AttachmentDir, events.AttachmentIncoming)); err != nil || len(left) != 0 {
		t.Errorf("after the cancel the uploads in progress are %v, %v; want none", left, err)
	}
	wantErrorOf(t, "chunk after cancel", e.do(http.MethodPut, "/v1/sessions/s1/files/uploads/"+begun.TransferID, chunkJSON(5, []byte("56789"))),
		http.StatusNotFound, events.CodeFileNotFound)
	wantErrorOf(t, "cancel again", e.do(http.MethodDelete, "/v1/sessions/s1/files/uploads/"+begun.TransferID, ""),
		http.StatusNotFound, events.CodeFileNotFound)
}

// TestPromptAttachmentOverHTTP: a prompt names an upload with a
// skein-attachment: link; the agent gets the file (embedded: the demo
// agent takes embedded context). Nine references are refused, and
// nothing is written.
func TestPromptAttachmentOverHTTP(t *testing.T) {
	e := newEnv(t)
	e.backend.Open("s1", "demo")
	f := uploadHTTP(t, e, "s1", "hello.txt", []byte("hello from a file"))
	link, _ := json.Marshal(map[string]string{"type": "resource_link", "uri": events.AttachmentScheme + f.Name, "name": f.Name})
	r := e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[{"type":"text","text":"blocks"},`+string(link)+`]}`)
	var res struct {
		Message struct {
			Content struct{ Text string } `json:"content"`
		} `json:"message"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil {
		t.Fatalf("prompt = %d %s", r.status, r.body)
	}
	line := strings.TrimSpace(strings.TrimPrefix(res.Message.Content.Text, "block "))
	var block struct {
		Type     string `json:"type"`
		Resource struct {
			URI  string `json:"uri"`
			Text string `json:"text"`
		} `json:"resource"`
	}
	if err := json.Unmarshal([]byte(line), &block); err != nil || block.Type != "resource" || block.Resource.Text != "hello from a file" ||
		!strings.HasPrefix(block.Resource.URI, "file:///") || !strings.HasSuffix(block.Resource.URI, "/.skein-attachments/hello.txt") {
		t.Errorf("the agent got %q (%v)", res.Message.Content.Text, err)
	}
	// The log keeps what the client sent.
	h := e.do(http.MethodGet, "/v1/sessions/s1/history", "")
	if !strings.Contains(string(h.body), events.AttachmentScheme+"hello.txt") {
		t.Errorf("history does not show the prompt's link as sent: %s", h.body)
	}

	last := e.backend.Last("s1")
	links := strings.Repeat(string(link)+",", events.MaxPromptAttachments+1)
	wantErrorOf(t, "nine attachments", e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[`+strings.TrimSuffix(links, ",")+`]}`),
		http.StatusBadRequest, events.CodeInvalidRequest)
	wantErrorOf(t, "a bad attachment name", e.do(http.MethodPost, "/v1/sessions/s1/prompt", `{"content":[{"type":"resource_link","uri":"skein-attachment:../x","name":"x"}]}`),
		http.StatusBadRequest, events.CodeInvalidRequest)
	if got := e.backend.Last("s1"); got != last {
		t.Errorf("a refused prompt moved the log from %d to %d", last, got)
	}
}
