//go:build linux

package adapterrunner_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	adapterrunner "skein.dev/services/adapter-runner"
)

// claudeModel is a loopback stand-in for the Anthropic Messages API: to a
// request of the agent's main loop (one that offers tools) it answers a
// Bash tool call running command; once a request carries that call's
// result, it keeps the result's text and answers a last message. Other
// requests (a title, a quota probe) get a short text.
type claudeModel struct{ attackModel }

func (m *claudeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/v1/messages") {
		if strings.HasSuffix(r.URL.Path, "/count_tokens") {
			_, _ = io.WriteString(w, `{"input_tokens":10}`)
			return
		}
		http.NotFound(w, r)
		return
	}
	var req struct {
		Stream   bool              `json:"stream"`
		Tools    []json.RawMessage `json:"tools"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var blocks []map[string]any
	switch {
	case len(req.Tools) == 0 || len(req.Messages) == 0:
		blocks = []map[string]any{{"type": "text", "text": "ok"}}
	default:
		last := req.Messages[len(req.Messages)-1]
		if out, ok := toolResult(last.Content); ok {
			m.got(out)
			blocks = []map[string]any{{"type": "text", "text": "Done."}}
		} else {
			blocks = []map[string]any{{"type": "tool_use", "id": "toolu_attack", "name": "Bash",
				"input": map[string]any{"command": m.attackCommand(), "description": "Tidy up"}}}
		}
	}
	stop := "end_turn"
	if blocks[0]["type"] == "tool_use" {
		stop = "tool_use"
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "msg_mock", "type": "message", "role": "assistant", "model": "claude-mock",
			"content": blocks, "stop_reason": stop, "stop_sequence": nil, "usage": map[string]int{"input_tokens": 10, "output_tokens": 5}})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(event string, data map[string]any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	}
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_mock", "type": "message",
		"role": "assistant", "model": "claude-mock", "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": 10, "output_tokens": 1}}})
	for i, b := range blocks {
		if b["type"] == "tool_use" {
			input, _ := json.Marshal(b["input"])
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
		} else {
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "text_delta", "text": b["text"]}})
		}
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": 5}})
	send("message_stop", map[string]any{"type": "message_stop"})
}

// toolResult returns the text of the tool_result block in a user
// message's content, if it has one.
func toolResult(content json.RawMessage) (string, bool) {
	var blocks []struct {
		Type    string          `json:"type"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(content, &blocks) != nil {
		return "", false
	}
	for _, b := range blocks {
		if b.Type != "tool_result" {
			continue
		}
		var s string
		if json.Unmarshal(b.Content, &s) == nil {
			return s, true
		}
		var parts []struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(b.Content, &parts)
		var texts []string
		for _, p := range parts {
			texts = append(texts, p.Text)
		}
		return strings.Join(texts, "\n"), true
	}
	return "", false
}

// claude-agent-acp's Bash tool, told by its model to read other tenants'
// data and write outside its session, is denied each attempt.
func TestSecurityRealClaudeIsConfined(t *testing.T) {
	bin := realAdapter(t, "claude-agent-acp")
	model := &claudeModel{}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	h := startSandboxed(t, adapterrunner.Agent{ID: "claude", Command: bin, Env: map[string]string{
		"ANTHROPIC_BASE_URL":                       srv.URL,
		"ANTHROPIC_API_KEY":                        "sk-ant-mock",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
		"DISABLE_AUTOUPDATER":                      "1",
	}})
	attackThrough(t, h, "claude", &model.attackModel, func() string { return "" })
}
