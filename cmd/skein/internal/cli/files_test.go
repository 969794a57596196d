package cli_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

// skein upload, files and download against the real stack: the file goes
// up in several chunks (the test server's 1 MiB messages), is listed, and
// comes back byte for byte; a second upload of the name takes another.
func TestUploadFilesDownload(t *testing.T) {
	e := newEnv(t)
	e.open("s1", "plain")
	dir := t.TempDir()
	src := filepath.Join(dir, "big.bin")
	data := bytes.Repeat([]byte("skein attachments\n"), 150_000) // 2.7 MB
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r := e.run(t.Context(), "", "upload", "-s", "s1", src)
	if r.err != nil || r.stdout != "uploaded .skein-attachments/big.bin (2700000 bytes); a prompt names it skein-attachment:big.bin\n" {
		t.Fatalf("upload = %v, printed %q", r.err, r.stdout)
	}
	r = e.run(t.Context(), "", "upload", "-s", "s1", "--name", "big.bin", src)
	if r.err != nil || !strings.Contains(r.stdout, "skein-attachment:big-2.bin") {
		t.Fatalf("second upload = %v, printed %q", r.err, r.stdout)
	}
	r = e.run(t.Context(), "", "files", "-s", "s1")
	if r.err != nil || strings.TrimSpace(r.stdout) != "-  .skein-attachments/" {
		t.Errorf("files = %v, printed %q", r.err, r.stdout)
	}
	r = e.run(t.Context(), "", "files", "-s", "s1", ".skein-attachments")
	if r.err != nil || r.stdout != "     2700000  big-2.bin\n     2700000  big.bin\n" {
		t.Errorf("files .skein-attachments = %v, printed %q", r.err, r.stdout)
	}
	out := filepath.Join(dir, "back.bin")
	if r := e.run(t.Context(), "", "download", "-s", "s1", "-o", out, ".skein-attachments/big.bin"); r.err != nil {
		t.Fatalf("download = %v", r.err)
	}
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, data) {
		t.Errorf("downloaded %d bytes (%v), want the %d uploaded", len(got), err, len(data))
	}
	wantCode(t, e.run(t.Context(), "", "download", "-s", "s1", "../etc/passwd").err, string(events.CodeInvalidRequest))
	wantCode(t, e.run(t.Context(), "", "download", "-s", "s1", "-o", filepath.Join(dir, "x"), "nope").err, string(events.CodeFileNotFound))
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Errorf("a failed download left its output file: %v", err)
	}
}

// skein prompt --attach names an upload: the agent gets the file (the
// test agent takes embedded context, and the file is small).
func TestPromptAttach(t *testing.T) {
	e := newEnv(t)
	e.open("s1", "plain")
	src := filepath.Join(t.TempDir(), "note.md")
	if err := os.WriteFile(src, []byte("# a <note> & more"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e.run(t.Context(), "", "upload", "-s", "s1", src); r.err != nil {
		t.Fatalf("upload: %v", r.err)
	}
	r := e.run(t.Context(), "", "prompt", "-s", "s1", "--attach", "note.md", "blocks")
	if r.err != nil || !strings.Contains(r.stdout, `"type":"resource"`) || !strings.Contains(r.stdout, `"text":"# a <note> & more"`) ||
		!strings.Contains(r.stdout, `/.skein-attachments/note.md"`) {
		t.Errorf("prompt --attach = %v, printed %q", r.err, r.stdout)
	}
	r = e.run(t.Context(), "", "prompt", "-s", "s1", "--attach", "../x", "blocks")
	wantCode(t, r.err, string(events.CodeInvalidRequest))
}
