package testagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
)

// FuzzHandleLine feeds arbitrary lines to the dispatcher: it must never
// panic, and everything it writes must be one JSON-RPC message per line.
func FuzzHandleLine(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`,
		`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}`,
		`{"jsonrpc":"2.0","id":"s","method":"session/load","params":{"sessionId":"x","cwd":"/tmp","mcpServers":[]}}`,
		`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"x","prompt":[{"type":"text","text":"say hi"}]}}`,
		`{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"x"}}`,
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":2}}`,
		`{"jsonrpc":"2.0","id":3,"method":"session/set_config_option","params":{"sessionId":"x","configId":"mode","value":true}}`,
		`{"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"cancelled"}}}`,
		`{"jsonrpc":"2.0","id":0,"error":{"code":-32601,"message":"x"}}`,
		`not json`, `[]`, `{}`, `null`, `{"jsonrpc":"2.0","id":{},"method":"x"}`, `{"jsonrpc":"2.0","id":1,"error":5}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var out bytes.Buffer
		cfg := config{LoadSession: true, Resume: true, Close: true, LegacyModes: true, ConfigOptions: []string{configMode, configModel}, ExitOnEOF: true}
		a := newAgent(cfg, slog.New(slog.DiscardHandler), &out, &lockedWriter{w: io.Discard})
		ctx, cancel := context.WithCancel(t.Context())
		for line := range strings.SplitSeq(in, "\n") {
			a.handleLine(ctx, readResult{line: []byte(line)})
		}
		a.shutdown(cancel, 0)
		sc := bufio.NewScanner(&out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil || string(m["jsonrpc"]) != `"2.0"` {
				t.Fatalf("input %q: agent wrote %q", in, sc.Bytes())
			}
		}
	})
}

func TestEnvNames(t *testing.T) {
	exported := []string{EnvLoadSession, EnvResume, EnvClose, EnvConfigOptions, EnvForgetConfig, EnvLegacyModes, EnvLegacyModels,
		EnvCommands, EnvStateDir, EnvControlDir, EnvExitOnEOF, EnvLogLevel, EnvAuthMethod, EnvSilent, EnvGarbage, EnvFailLoad,
		EnvPromptCapabilities}
	var c config
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.registerFlags(fs)
	var derived []string
	fs.VisitAll(func(f *flag.Flag) { derived = append(derived, envName(f.Name)) })
	slices.Sort(exported)
	slices.Sort(derived)
	if !slices.Equal(exported, derived) {
		t.Errorf("exported env names %v, flags derive %v", exported, derived)
	}
}

func TestParseConfig(t *testing.T) {
	env := map[string]string{EnvExitOnEOF: "0", EnvConfigOptions: "mode", EnvLogLevel: "debug", EnvResume: "1"}
	c, err := parseConfig([]string{"-config-options=model,mode,model", "--resume=false"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.ExitOnEOF || c.Resume || c.LogLevel != slog.LevelDebug || !slices.Equal(c.ConfigOptions, []string{"model", "mode"}) {
		t.Errorf("parseConfig = %+v, want exit-on-eof off (env), resume off (flag beats env), debug, [model mode]", c)
	}
	all := promptCapabilities{Image: true, Audio: true, EmbeddedContext: true}
	if c, err := parseConfig(nil, func(string) string { return "" }, io.Discard); err != nil || !c.ExitOnEOF || c.PromptCapabilities != all {
		t.Errorf("default config = %+v, %v; want exit-on-eof on, every prompt capability", c, err)
	}
}

func TestParsePromptCapabilities(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want promptCapabilities
	}{
		{nil, "", promptCapabilities{Image: true, Audio: true, EmbeddedContext: true}},
		{[]string{"--prompt-capabilities="}, "", promptCapabilities{}},
		{[]string{"--prompt-capabilities=none"}, "", promptCapabilities{}},
		{[]string{"--prompt-capabilities=image"}, "", promptCapabilities{Image: true}},
		{[]string{"--prompt-capabilities", "audio, embeddedContext"}, "", promptCapabilities{Audio: true, EmbeddedContext: true}},
		{nil, "none", promptCapabilities{}},
		{nil, "embeddedContext", promptCapabilities{EmbeddedContext: true}},
		{[]string{"--prompt-capabilities=image"}, "audio", promptCapabilities{Image: true}}, // the flag wins
	} {
		getenv := func(k string) string {
			if k == EnvPromptCapabilities {
				return tc.env
			}
			return ""
		}
		c, err := parseConfig(tc.args, getenv, io.Discard)
		if err != nil || c.PromptCapabilities != tc.want {
			t.Errorf("parseConfig(%q, %s=%q) = %+v, %v; want %+v", tc.args, EnvPromptCapabilities, tc.env, c.PromptCapabilities, err, tc.want)
		}
	}
	for _, bad := range []string{"video", "Image", "image,embedded_context"} {
		if _, err := parseConfig([]string{"--prompt-capabilities=" + bad}, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("--prompt-capabilities=%s: no error, want one", bad)
		}
	}
}

// writes records each Write whole, and tells wrote of each.
type writes struct {
	mu    sync.Mutex
	all   [][]byte
	wrote chan []byte
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all = append(w.all, bytes.Clone(p))
	w.wrote <- bytes.Clone(p)
	return len(p), nil
}

// "burst" writes what follows in one Write, up to a command that waits.
func TestBurst(t *testing.T) {
	out := writes{wrote: make(chan []byte, 16)}
	a := newAgent(config{ExitOnEOF: true}, slog.New(slog.DiscardHandler), &out, &lockedWriter{w: io.Discard})
	ctx, cancel := context.WithCancel(t.Context())
	a.handleLine(ctx, readResult{line: []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}`)})
	a.handleLine(ctx, readResult{line: []byte(`{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}`)})
	var created struct {
		Result struct{ SessionID string } `json:"result"`
	}
	out.mu.Lock()
	err := json.Unmarshal(out.all[len(out.all)-1], &created)
	out.mu.Unlock()
	if err != nil || created.Result.SessionID == "" {
		t.Fatalf("session/new answered %v", err)
	}
	script, _ := json.Marshal("say before\nburst\nchunks 3 x\nplan a | b\nsleep 1\nsay after")
	a.handleLine(ctx, readResult{line: fmt.Appendf(nil,
		`{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":%s}]}}`,
		created.Result.SessionID, script)})
	for w := range out.wrote { // until the prompt's answer
		if bytes.Contains(w, []byte(`"id":2,`)) {
			break
		}
	}
	a.shutdown(cancel, 0)

	out.mu.Lock()
	defer out.mu.Unlock()
	var lines []int // the number of lines of each Write after session/new's answer
	for _, w := range out.all[2:] {
		lines = append(lines, bytes.Count(w, []byte("\n")))
	}
	// say before; the burst: three chunks and a plan; say after; the answer.
	if want := []int{1, 4, 1, 1}; !slices.Equal(lines, want) {
		t.Errorf("lines per write = %v, want %v", lines, want)
	}
}
