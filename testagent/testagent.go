// Package testagent is skein-testagent: a deterministic, scriptable ACP
// agent. It speaks ACP v1 (JSON-RPC 2.0, one message per line) on stdin and
// stdout, logs to stderr, and answers every session/prompt by running the
// prompt text as a script: "say hi", "tool call_1", "permission call_1",
// "sleep 500", "pause p1", "crash 3", ... Tests and the Skein dev stack use
// it as the agent behind sessions.
//
// It answers at once unless the script asks for a delay, sends exactly the
// message shapes the real adapters send (see shared/acp/transcripts), and
// keeps its sessions in memory and, with a state dir, on disk so that a new
// process can session/load them.
//
// The binary is cmd/skein-testagent; Main is also usable in-process. README.md
// documents the flags and the script language.
package testagent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// Main runs the agent on stdin and stdout until stdin is closed, a "crash"
// command runs, or ctx is done, and returns the process exit code: 0 after
// stdin EOF or ctx, the crash code after "crash", 2 for bad flags or
// environment. args are the command-line arguments without the program
// name; getenv supplies the SKEIN_TESTAGENT_* fallbacks (flags win).
//
// At stdin EOF, running turns are let finish (a permission request still
// waiting resolves as cancelled, since no answer can arrive) and Main
// returns 0, unless -exit-on-eof=false, in which case it returns only once
// ctx is done. When ctx is done, running turns are cancelled and answered
// with stopReason "cancelled" first.
//
// Main does not close stdin, stdout or stderr. A Read on stdin cannot be
// interrupted, so when Main returns before stdin is exhausted, one goroutine
// stays blocked in that Read until stdin is closed or delivers.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	errw := &lockedWriter{w: stderr}
	cfg, err := parseConfig(args, getenv, errw)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(errw, "skein-testagent:", err)
		return 2
	}
	lg := slog.New(slog.NewTextHandler(errw, &slog.HandlerOptions{Level: cfg.LogLevel})).With("svc", "testagent")
	lg.Debug("testagent started",
		"load_session", cfg.LoadSession, "resume", cfg.Resume, "close", cfg.Close,
		"config_options", cfg.ConfigOptions, "legacy_modes", cfg.LegacyModes, "legacy_models", cfg.LegacyModels,
		"commands", cfg.Commands, "state_dir", cfg.StateDir, "control_dir", cfg.ControlDir, "exit_on_eof", cfg.ExitOnEOF,
		"silent", cfg.Silent, "garbage", cfg.Garbage, "fail_load", cfg.FailLoad)
	return newAgent(cfg, lg, stdout, errw).run(ctx, stdin)
}
