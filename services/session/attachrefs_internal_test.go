package session

import (
	"encoding/json"
	"errors"
	"testing"

	"skein.dev/pkg/events"
)

func TestCheckAttachmentRefs(t *testing.T) {
	link := func(uri string) json.RawMessage {
		b, _ := json.Marshal(map[string]string{"type": "resource_link", "uri": uri, "name": "x"})
		return b
	}
	text := json.RawMessage(`{"type":"text","text":"skein-attachment:a.txt"}`)
	var blocks []json.RawMessage
	for range events.MaxPromptAttachments {
		blocks = append(blocks, link("skein-attachment:a.txt"))
	}
	blocks = append(blocks, text, link("file:///etc/passwd"))
	if err := checkAttachmentRefs(blocks); err != nil {
		t.Errorf("%d references: %v", events.MaxPromptAttachments, err)
	}
	if err := checkAttachmentRefs(append(blocks, link("skein-attachment:b.txt"))); !errors.Is(err, events.ErrInvalidRequest) {
		t.Errorf("%d references = %v, want invalid_request", events.MaxPromptAttachments+1, err)
	}
	for _, bad := range []string{"skein-attachment:", "skein-attachment:../x", "skein-attachment:a/b", "skein-attachment:.incoming"} {
		if err := checkAttachmentRefs([]json.RawMessage{link(bad)}); !errors.Is(err, events.ErrInvalidRequest) {
			t.Errorf("reference %q = %v, want invalid_request", bad, err)
		}
	}
}
