//go:build linux

package adapterrunner_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	adapterrunner "skein.dev/services/adapter-runner"
)

// codexModel is a loopback stand-in for the OpenAI Responses API, as
// codex streams it over HTTP (POST …/responses, server-sent events). To a
// request that offers the exec_command tool it answers a call of it
// running command; once a request carries that call's output, it keeps
// the output and answers a last message. Anything else gets 404.
type codexModel struct {
	attackModel
	toolsMu sync.Mutex
	tools   []string // those of the last request, for a failure message
}

// codexCallID is the call_id of the model's one tool call.
const codexCallID = "call_attack"

func (m *codexModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
		Input []struct {
			Type   string          `json:"type"`
			CallID string          `json:"call_id"`
			Output json.RawMessage `json:"output"`
		} `json:"input"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var tools []string
	for _, tool := range req.Tools {
		tools = append(tools, tool.Name)
	}
	m.toolsMu.Lock()
	m.tools = tools
	m.toolsMu.Unlock()
	for _, in := range req.Input {
		if in.Type == "function_call_output" && in.CallID == codexCallID {
			m.got(functionOutput(in.Output))
		}
	}
	item := map[string]any{"type": "message", "role": "assistant", "id": "msg_mock",
		"content": []map[string]any{{"type": "output_text", "text": "Done."}}}
	if !m.delivered() && slices.Contains(tools, "exec_command") {
		args, _ := json.Marshal(map[string]string{"cmd": m.attackCommand()})
		item = map[string]any{"type": "function_call", "id": "fc_attack", "call_id": codexCallID,
			"name": "exec_command", "arguments": string(args)}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(data map[string]any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", data["type"], b)
	}
	send(map[string]any{"type": "response.created", "response": map[string]any{"id": "resp_mock"}})
	send(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	send(map[string]any{"type": "response.completed", "response": map[string]any{"id": "resp_mock",
		"usage": map[string]int{"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}})
}

// functionOutput returns the text of a function_call_output's output: a
// string, or a list of content items.
func functionOutput(output json.RawMessage) string {
	var s string
	if json.Unmarshal(output, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(output, &parts)
	var texts []string
	for _, p := range parts {
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n")
}

// codex-acp's exec_command tool, told by its model to read other
// tenants' data and write outside its session, is denied each attempt.
//
// Codex confines the commands it runs with a sandbox of its own
// (bubblewrap, on Linux), which would deny the attack before the runner's
// could and so prove nothing about it; where no bwrap is installed (the
// npm package ships none) it fails every command instead. The agent is
// therefore configured as an operator who leaves confinement to Skein
// would: codex's sandbox_mode danger-full-access, approval never. Codex
// then runs the command as its plain child, under the runner's sandbox
// only.
//
// The model is a custom provider: codex's built-in openai provider talks
// WebSocket first, and falls back to HTTP only after five failed tries. A
// provider reads its key from its env_key, so the agent needs no ACP
// authenticate (AuthMethod), which would also write the key to the
// session's HOME/.codex/auth.json.
func TestSecurityRealCodexIsConfined(t *testing.T) {
	bin := realAdapter(t, "codex-acp")
	model := &codexModel{}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	provider := fmt.Sprintf(`model_providers.mock={name="mock", base_url=%q, env_key="OPENAI_API_KEY", wire_api="responses"}`, srv.URL+"/v1")
	h := startSandboxed(t, adapterrunner.Agent{ID: "codex", Command: bin,
		Args: []string{
			"-c", provider,
			"-c", `model_provider="mock"`,
			"-c", `sandbox_mode="danger-full-access"`,
			"-c", `approval_policy="never"`,
		},
		Env: map[string]string{"OPENAI_API_KEY": "sk-mock"},
	})
	attackThrough(t, h, "codex", &model.attackModel, func() string {
		model.toolsMu.Lock()
		defer model.toolsMu.Unlock()
		return fmt.Sprintf(" (the agent offered the tools %q)", model.tools)
	})
}
