package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/client"
	"skein.dev/pkg/events"
)

// The Go client uploads over NATS (chunks sized to the connection's
// 1 MiB messages), lists, downloads, and names the upload in a prompt;
// the runner's configured cap refuses a larger file, and leaves nothing.
func TestGoClientFiles(t *testing.T) {
	ns := natstest.Run(t)
	startStackTB(t, ns, t.TempDir(), func(c *stackConfig) { c.Runner.FileMaxBytes = 3 << 20 })
	cl, err := client.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
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
