package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
)

// The Go client uploads over NATS (chunks sized to the connection's
// 1 MiB messages), lists, downloads, and names the upload in a prompt;
// the runner's configured cap refuses a larger file, and leaves nothing.
func TestGoClientFiles(t *testing.T) {
	cl := goClientOn(t, t.TempDir(), func(c *stackConfig) { c.Runner.FileMaxBytes = 3 << 20 })
	ctx := t.Context()
	if err := cl.Open(ctx, "f1", events.AcpOpenSessionRequest{Agent: "test"}); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 150_000) // 2.4 MB
	f, err := cl.Upload(ctx, "f1", "data.txt", int64(len(data)), bytes.NewReader(data))
	if err != nil || f.Name != "data.txt" || f.Size != int64(len(data)) {
		t.Fatalf("Upload = %+v, %v", f, err)
	}
	_, err = cl.Upload(ctx, "f1", "huge.txt", 3<<20+1, bytes.NewReader(make([]byte, 3<<20+1)))
	if e := events.AsError(err); e == nil || e.Code != events.CodePayloadTooLarge {
		t.Errorf("Upload over the cap = %v, want payload_too_large", err)
	}
	list, err := cl.Files(ctx, "f1", events.AttachmentDir)
	if err != nil || len(list.Files) != 1 || list.Files[0].Name != "data.txt" {
		t.Errorf("Files = %+v, %v; want data.txt alone", list, err)
	}
	var back bytes.Buffer
	if info, err := cl.Download(ctx, "f1", f.Path, &back); err != nil || info.Size != int64(len(data)) || !bytes.Equal(back.Bytes(), data) {
		t.Errorf("Download = %+v, %v, %d bytes; want the %d uploaded", info, err, back.Len(), len(data))
	}
	if _, err := cl.Download(ctx, "f1", "../x", &back); !errors.Is(err, events.ErrInvalidRequest) {
		t.Errorf("Download ../x = %v, want invalid_request", err)
	}

	// Too large to embed: the agent gets a file:// link with the size.
	content, _ := json.Marshal([]map[string]any{
		{"type": "text", "text": "blocks"},
		{"type": "resource_link", "uri": events.AttachmentScheme + f.Name, "name": f.Name},
	})
	res, err := cl.Prompt(ctx, "f1", content)
	if err != nil || !strings.Contains(string(res.Message), `\"type\":\"resource_link\"`) || !strings.Contains(string(res.Message), `/.skein-attachments/data.txt\"`) ||
		!strings.Contains(string(res.Message), `\"size\":2400000`) {
		t.Errorf("prompt = %s, %v; want the agent to report a file:// link to data.txt with its size", res.Message, err)
	}
}

// An upload whose reader fails after its begin is cancelled by the
// client: nothing of it stays on the runner, and CancelUpload of an
// upload that is over is file_not_found.
func TestGoClientUploadCancelled(t *testing.T) {
	dataDir := testutil.TempDir(t)
	cl := goClientOn(t, dataDir)
	ctx := t.Context()
	if err := cl.Open(ctx, "c1", events.AcpOpenSessionRequest{Agent: "test"}); err != nil {
		t.Fatal(err)
	}
	broken := io.MultiReader(bytes.NewReader(make([]byte, 1<<20)), iotest.ErrReader(errors.New("disk unplugged")))
	if _, err := cl.Upload(ctx, "c1", "broken.bin", 3<<20, broken); err == nil {
		t.Fatal("Upload from a failing reader succeeded")
	}
	incoming := filepath.Join(dataDir, "workspaces", "default", "c1", events.AttachmentDir, events.AttachmentIncoming)
	if left, err := os.ReadDir(incoming); err != nil || len(left) != 0 {
		t.Errorf("after a failed upload, %s holds %v (%v); want it empty", incoming, left, err)
	}
	list, err := cl.Files(ctx, "c1", events.AttachmentDir)
	if err != nil || len(list.Files) != 0 {
		t.Errorf("Files = %+v, %v; want nothing listed", list, err)
	}
	if err := cl.CancelUpload(ctx, "c1", "e2e~nosuchupload"); events.AsError(err) == nil || events.AsError(err).Code != events.CodeFileNotFound {
		t.Errorf("CancelUpload of an unknown upload = %v, want file_not_found", err)
	}
}

// Two uploads of one name through the whole stack, committed at once,
// round after round: each lands under a name of its own, whole, and none
// replaces another.
func TestGoClientUploadRace(t *testing.T) {
	cl := goClientOn(t, t.TempDir())
	ctx := t.Context()
	if err := cl.Open(ctx, "r1", events.AcpOpenSessionRequest{Agent: "test"}); err != nil {
		t.Fatal(err)
	}
	const rounds = 10
	names := map[string][]byte{}
	for round := range rounds {
		var files [2]*events.FileInfo
		var errs [2]error
		var contents [2][]byte
		var wg sync.WaitGroup
		for i := range 2 {
			contents[i] = fmt.Appendf(nil, "round %d, upload %d", round, i)
			wg.Go(func() {
				files[i], errs[i] = cl.Upload(ctx, "r1", "same.txt", int64(len(contents[i])), bytes.NewReader(contents[i]))
			})
		}
		wg.Wait()
		for i := range 2 {
			if errs[i] != nil {
				t.Fatalf("round %d, upload %d: %v", round, i, errs[i])
			}
			if _, taken := names[files[i].Name]; taken {
				t.Fatalf("round %d, upload %d landed on %s, taken already", round, i, files[i].Name)
			}
			names[files[i].Name] = contents[i]
		}
	}
	for name, want := range names {
		var got bytes.Buffer
		if _, err := cl.Download(ctx, "r1", events.AttachmentDir+"/"+name, &got); err != nil || !bytes.Equal(got.Bytes(), want) {
			t.Errorf("%s = %q, %v; want %q", name, got.Bytes(), err, want)
		}
	}
	if len(names) != 2*rounds {
		t.Errorf("%d names, want %d", len(names), 2*rounds)
	}
}
