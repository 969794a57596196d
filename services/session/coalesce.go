package session

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
)

// coalescer holds the chunks of the message in progress. A message ends when
// its messageId changes, the kind changes, another update arrives or the turn
// ends; it then becomes durable as few updates as possible: each run of text
// chunks is one update whose text is the run's texts joined, and every other
// chunk (an image, a resource) stays as it came. A joined text larger than a
// log record may be is split into several updates of the same message.
type coalescer struct {
	active    bool
	kind      string
	messageID *string
	chunks    []json.RawMessage
	bytes     int64
	// first and last are the ACP_IO positions of the first and the last
	// chunk held: what a new owner must read again to hold them too, since
	// they are in memory only until the message ends.
	first, last ioPos
}

func (c *coalescer) continues(kind string, messageID *string) bool {
	if !c.active {
		return true
	}
	if c.kind != kind || (c.messageID == nil) != (messageID == nil) {
		return false
	}
	return c.messageID == nil || *c.messageID == *messageID
}

// add holds one chunk, at that place in ACP_IO.
func (c *coalescer) add(kind string, messageID *string, update json.RawMessage, at ioPos) {
	if !c.active {
		c.active, c.kind, c.messageID, c.first = true, kind, messageID, at
	}
	c.chunks = append(c.chunks, update)
	c.bytes += int64(len(update))
	c.last = at
}

func (c *coalescer) reset() { *c = coalescer{} }

// take returns the coalesced updates of the message, none larger than
// maxRecord bytes, and empties the buffer.
func (c *coalescer) take(maxRecord int) ([]json.RawMessage, error) {
	if !c.active {
		return nil, nil
	}
	chunks := c.chunks
	c.reset()
	return coalesce(chunks, maxRecord)
}

// coalesce merges each run of text chunks into one update. A run of one
// chunk is kept byte for byte; a longer run keeps the first chunk's fields
// (messageId, _meta, the content's annotations) with the joined text.
func coalesce(chunks []json.RawMessage, maxRecord int) ([]json.RawMessage, error) {
	var out []json.RawMessage
	var run []json.RawMessage
	var text strings.Builder
	var err error
	end := func() {
		switch {
		case len(run) == 0:
		case len(run) == 1 && len(run[0]) <= maxRecord:
			out = append(out, run[0])
		default:
			out, err = appendText(out, run[0], text.String(), maxRecord, err)
		}
		run = run[:0]
		text.Reset()
	}
	for _, ch := range chunks {
		t, ok := chunkText(ch)
		if !ok {
			end()
			if len(ch) > maxRecord && err == nil {
				err = events.Errorf(events.CodePayloadTooLarge, "a chunk of %d bytes is larger than a log record may be (%d)", len(ch), maxRecord)
			}
			out = append(out, ch)
			continue
		}
		run = append(run, ch)
		text.WriteString(t)
	}
	end()
	return out, err
}

// appendText appends the updates carrying text, shaped like first: one if
// it fits in maxRecord, else as many as it takes, cut at rune boundaries.
func appendText(out []json.RawMessage, first json.RawMessage, text string, maxRecord int, err error) ([]json.RawMessage, error) {
	whole := withText(first, text)
	if len(whole) <= maxRecord {
		return append(out, whole), err
	}
	// The frame around the text, and JSON escaping at worst 6 bytes a byte.
	room := (maxRecord - (len(whole) - len(text)) - 64) / 6
	if room < utf8.UTFMax {
		return out, events.Errorf(events.CodePayloadTooLarge, "log records are too small (%d bytes) for a message", maxRecord)
	}
	for len(text) > 0 {
		n := min(room, len(text))
		for n < len(text) && !utf8.RuneStart(text[n]) {
			n--
		}
		out = append(out, withText(first, text[:n]))
		text = text[n:]
	}
	return out, err
}

// chunkText returns the text of a chunk whose content is a text block.
func chunkText(update json.RawMessage) (string, bool) {
	return acp.ContentText(update)
}

// withText returns update with content.text replaced by text, every other
// byte as it was (acp.WithMember, the one byte-preserving scanner).
func withText(update json.RawMessage, text string) json.RawMessage {
	content, ok, err := acp.Member(update, "content")
	if err != nil || !ok {
		return update
	}
	var quoted bytes.Buffer
	enc := json.NewEncoder(&quoted)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(text) // a string always encodes
	q := bytes.TrimSuffix(quoted.Bytes(), []byte("\n"))
	return acp.WithMember(update, "content", acp.WithMember(content, "text", q))
}
