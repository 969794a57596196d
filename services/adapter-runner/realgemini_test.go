//go:build linux

package adapterrunner_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	adapterrunner "skein.dev/services/adapter-runner"
)

// geminiShellTool is the name of gemini-cli's shell tool, as its model
// calls it.
const geminiShellTool = "run_shell_command"

// geminiModel is a loopback stand-in for the Gemini API
// (generateContent and streamGenerateContent): to a request that offers
// the shell tool it answers a call of it running command; once a
// request carries that call's functionResponse, it keeps the tool's
// output and answers a last message. Other requests get a short text.
type geminiModel struct{ attackModel }

func (m *geminiModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The path is /v1beta/models/<model>:<method>.
	_, method, _ := strings.Cut(r.URL.Path, ":")
	if r.Method != http.MethodPost || (method != "generateContent" && method != "streamGenerateContent") {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Contents []struct {
			Parts []geminiPart `json:"parts"`
		} `json:"contents"`
		Tools []struct {
			FunctionDeclarations []struct {
				Name string `json:"name"`
			} `json:"functionDeclarations"`
		} `json:"tools"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	offersShell := false
	for _, t := range req.Tools {
		for _, d := range t.FunctionDeclarations {
			offersShell = offersShell || d.Name == geminiShellTool
		}
	}
	part := map[string]any{"text": "ok"}
	if offersShell && len(req.Contents) > 0 {
		if out, ok := geminiToolOutput(req.Contents[len(req.Contents)-1].Parts); ok {
			m.got(out)
			part = map[string]any{"text": "Done."}
		} else {
			part = map[string]any{"functionCall": map[string]any{"name": geminiShellTool,
				"args": map[string]any{"command": m.attackCommand(), "description": "Tidy up"}}}
		}
	}
	b, _ := json.Marshal(map[string]any{
		"candidates": []any{map[string]any{"index": 0, "finishReason": "STOP",
			"content": map[string]any{"role": "model", "parts": []any{part}}}},
		"usageMetadata": map[string]int{"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
		"modelVersion":  "gemini-mock",
	})
	if method == "generateContent" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
		return
	}
	// streamGenerateContent?alt=sse: one event holds the whole answer.
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "data: %s\n\n", b)
}

// geminiPart is the part of a request's content that the model reads:
// the result of a function it called.
type geminiPart struct {
	FunctionResponse *struct {
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse"`
}

// geminiToolOutput returns what the shell tool printed, from the
// functionResponse among parts, if there is one: its response's output
// when that is a string (gemini-cli wraps it in <untrusted_context>),
// else the whole response.
func geminiToolOutput(parts []geminiPart) (string, bool) {
	for _, p := range parts {
		fr := p.FunctionResponse
		if fr == nil || fr.Name != geminiShellTool {
			continue
		}
		var resp struct {
			Output string `json:"output"`
		}
		if json.Unmarshal(fr.Response, &resp) == nil && resp.Output != "" {
			return resp.Output, true
		}
		return string(fr.Response), true
	}
	return "", false
}

// gemini-cli's shell tool, told by its model to read other tenants' data
// and write outside its session, is denied each attempt. The tool stops
// collecting output once it sees binary (NUL bytes in its first 4 KiB),
// which is why the attack prints what it reads with NULs as newlines.
func TestSecurityRealGeminiIsConfined(t *testing.T) {
	bin := realAdapter(t, "gemini")
	model := &geminiModel{}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	h := startSandboxed(t, adapterrunner.Agent{ID: "gemini", Command: bin, Args: []string{"--acp"}, Env: map[string]string{
		"GOOGLE_GEMINI_BASE_URL": srv.URL,
		"GEMINI_API_KEY":         "gemini-mock",
		// A model of its own: "auto" would first ask a classifier model
		// which one to use.
		"GEMINI_MODEL": "gemini-2.5-pro",
		// Else it re-launches itself as a child, and ignores SIGTERM.
		"GEMINI_CLI_NO_RELAUNCH": "true",
	}})
	// Usage statistics off, or it posts them to Google. gemini-cli skips
	// a system settings file (GEMINI_CLI_SYSTEM_SETTINGS_PATH) that is
	// not root's with every directory above it unwritable by others, as
	// nothing under /tmp is: the test writes the user settings file, in
	// the session's isolated HOME, before the session starts.
	home := filepath.Join(h.dataDir, "default", "attacker", "home")
	mkdirs(t, home) // as the runner makes it, 0700
	writeFile(t, filepath.Join(home, ".gemini", "settings.json"),
		`{"privacy":{"usageStatisticsEnabled":false}}`)
	giveToAdapters(t, filepath.Join(home, ".gemini")) // as the adapter would have made it in its HOME
	attackThrough(t, h, "gemini", &model.attackModel, func() string { return "" })
}
