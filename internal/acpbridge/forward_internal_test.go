package acpbridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// delivered is what a follow sends its client for a stream of events.
func delivered(t *testing.T, steps []string) []string {
	t.Helper()
	f := &follow{c: &conn{lg: slog.New(slog.DiscardHandler)}}
	var out []string
	for _, s := range steps {
		kind, text, _ := strings.Cut(s, ":")
		data := []byte(`{"sessionId":"s","sequence":1,"eventNo":1,"type":"agent_message_chunk","messageId":"m","content":{"type":"text","text":` + quote(text) + `}}`)
		var h head
		if err := json.Unmarshal(data, &h); err != nil {
			t.Fatal(err)
		}
		var ch chunk
		if err := json.Unmarshal(data, &ch); err != nil {
			t.Fatal(err)
		}
		switch kind {
		case "delta":
			f.text.take(h.Type + "\x00" + ch.MessageID)
			f.text.deltas = true
			f.text.sent += ch.Content.Text
			out = append(out, text)
		case "stored":
			got, ok := f.unseen(h, ch, data)
			if !ok {
				continue
			}
			if err := json.Unmarshal(got, &ch); err != nil {
				t.Fatal(err)
			}
			out = append(out, ch.Content.Text)
		}
	}
	return out
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// A message streamed as deltas and then stored joined reaches the client
// once: the stored event only for the text the deltas missed.
func TestStoredChunksAfterDeltas(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []string
		want  string
	}{
		{"deltas carried it all", []string{"delta:a ", "delta:b", "stored:a b"}, "a b"},
		{"no delta", []string{"stored:a b"}, "a b"},
		{"the last delta lost", []string{"delta:a ", "stored:a b"}, "a b"},
		{"a message split in two parts", []string{"delta:a ", "delta:b ", "delta:c", "stored:a b ", "stored:c"}, "a b c"},
		{"parts after a lost tail", []string{"delta:a ", "stored:a b ", "stored:c"}, "a b c"},
		{"deltas that differ", []string{"delta:x", "stored:a"}, "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(delivered(t, tc.steps), ""); got != tc.want {
				t.Errorf("the client got %q, want %q", got, tc.want)
			}
		})
	}
}

// An event's public JSON becomes the ACP update it carries: Skein's
// members out, sessionUpdate in, the agent's _meta kept beside Skein's
// place in the log.
func TestACPUpdate(t *testing.T) {
	data := []byte(`{"sessionId":"s1","sequence":7,"eventNo":2,"timestamp":"t","durability":"durable","type":"tool_call","toolCallId":"c1","title":"ls","_meta":{"agent/x":1}}`)
	var h head
	if err := json.Unmarshal(data, &h); err != nil {
		t.Fatal(err)
	}
	got, err := acpUpdate(data, h, true)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"_meta":{"agent/x":1,"skein/eventNo":2,"skein/sequence":7},"sessionUpdate":"tool_call","title":"ls","toolCallId":"c1"}`
	if string(got) != want {
		t.Errorf("update\n got %s\nwant %s", got, want)
	}
	live, err := acpUpdate(data, h, false)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(live, []byte("skein/")) {
		t.Errorf("a delta's update %s carries a place in the log", live)
	}
}

// The stdio transport reads one message a line, skips blank lines, takes
// a last line without its newline, and refuses a line over the limit.
func TestStdioFraming(t *testing.T) {
	in := "{\"a\":1}\r\n\n  \n{\"b\":2}\n{\"c\":3}"
	s := NewStdio(strings.NewReader(in), io.Discard)
	var got []string
	for {
		m, err := s.Read(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m))
	}
	if strings.Join(got, " ") != `{"a":1} {"b":2} {"c":3}` {
		t.Errorf("messages %q", got)
	}
	big := NewStdio(strings.NewReader(strings.Repeat("x", MaxMessageBytes+1)+"\n"), io.Discard)
	if _, err := big.Read(context.Background()); !errors.Is(err, ErrMessageTooLarge) {
		t.Errorf("a line over the limit: %v, want ErrMessageTooLarge", err)
	}
	var buf bytes.Buffer
	if err := NewStdio(strings.NewReader(""), &buf).Write(context.Background(), []byte(`{"x":1}`)); err != nil || buf.String() != "{\"x\":1}\n" {
		t.Errorf("write: %q, %v", buf.String(), err)
	}
}
