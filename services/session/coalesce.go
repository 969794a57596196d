package session

import (
	"bytes"
	"encoding/json"
	"strings"
)

// The two update kinds that stream as deltas.
const (
	kindMessageChunk = "agent_message_chunk"
	kindThoughtChunk = "agent_thought_chunk"
)

// coalescer holds the chunks of the message in progress. A message ends when
// its messageId changes, the kind changes, another update arrives or the turn
// ends; it then becomes durable as few updates as possible: each run of text
// chunks is one update whose text is the run's texts joined, and every other
// chunk (an image, a resource) stays as it came.
type coalescer struct {
	active    bool
	kind      string
	messageID *string
	chunks    []json.RawMessage
	lastKind  string // kind of the message last taken
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

func (c *coalescer) add(kind string, messageID *string, update json.RawMessage) {
	if !c.active {
		c.active, c.kind, c.messageID = true, kind, messageID
	}
	c.chunks = append(c.chunks, update)
}

func (c *coalescer) reset() { *c = coalescer{lastKind: c.lastKind} }

// take returns the coalesced updates of the message and empties the buffer.
func (c *coalescer) take() []json.RawMessage {
	if !c.active {
		return nil
	}
	chunks, kind := c.chunks, c.kind
	c.reset()
	c.lastKind = kind
	return coalesce(chunks)
}

// coalesce merges each run of text chunks into one update. A run of one
// chunk is kept byte for byte; a longer run keeps the first chunk's fields
// (messageId, _meta, the content's annotations) with the joined text.
func coalesce(chunks []json.RawMessage) []json.RawMessage {
	var out []json.RawMessage
	var run []json.RawMessage
	var text strings.Builder
	end := func() {
		switch len(run) {
		case 0:
		case 1:
			out = append(out, run[0])
		default:
			out = append(out, withText(run[0], text.String()))
		}
		run = run[:0]
		text.Reset()
	}
	for _, ch := range chunks {
		t, ok := chunkText(ch)
		if !ok {
			end()
			out = append(out, ch)
			continue
		}
		run = append(run, ch)
		text.WriteString(t)
	}
	end()
	return out
}

// chunkText returns the text of a chunk whose content is a text block.
func chunkText(update json.RawMessage) (string, bool) {
	var u struct {
		Content struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal(update, &u) != nil || u.Content.Type != "text" || u.Content.Text == nil {
		return "", false
	}
	return *u.Content.Text, true
}

// withText returns update with content.text replaced by text, every other
// byte as it was.
func withText(update json.RawMessage, text string) json.RawMessage {
	content, ok := valueSpan(update, "content")
	if !ok {
		return update
	}
	inner := update[content[0]:content[1]]
	span, ok := valueSpan(inner, "text")
	if !ok {
		return update
	}
	quoted, _ := json.Marshal(text)
	var b bytes.Buffer
	b.Grow(len(update) + len(quoted))
	b.Write(update[:content[0]+span[0]])
	b.Write(quoted)
	b.Write(update[content[0]+span[1]:])
	return b.Bytes()
}

// valueSpan finds the byte span of the value of key in the JSON object obj.
func valueSpan(obj []byte, key string) ([2]int, bool) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return [2]int{}, false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return [2]int{}, false
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return [2]int{}, false
		}
		if k == key {
			end := int(dec.InputOffset())
			return [2]int{end - len(v), end}, true
		}
	}
	return [2]int{}, false
}
