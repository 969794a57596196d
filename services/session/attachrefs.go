package session

import (
	"encoding/json"

	"skein.dev/pkg/events"
)

// checkAttachmentRefs checks a prompt's content: at most
// events.MaxPromptAttachments blocks name uploads, each by a valid name
// (events.AttachmentRef). It reads nothing else of the blocks.
func checkAttachmentRefs(blocks []json.RawMessage) error {
	n := 0
	for _, b := range blocks {
		if _, ok, err := events.AttachmentRef(b); err != nil {
			return err
		} else if ok {
			if n++; n > events.MaxPromptAttachments {
				return events.Errorf(events.CodeInvalidRequest, "a prompt may reference at most %d attachments", events.MaxPromptAttachments)
			}
		}
	}
	return nil
}
