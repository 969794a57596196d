package main

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"skein.dev/internal/testutil"
)

// maxStartLine is the longest line skein dev may log at info level while
// it starts: a person reads them.
const maxStartLine = 1000

// TestDevStartLogIsShort: at info level, skein dev's log lines are short,
// and one of them gives what a person needs (the addresses, the data
// directory, the sandbox and the agents); the whole configuration is at
// debug level only.
func TestDevStartLogIsShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs skein dev; skipped in -short")
	}
	project, err := filepath.EvalSymlinks(testutil.TempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "data")
	_, _, stderr, stop := startDevIn(t, project, func(string) string { return "" }, "--data", data)
	// The start line is logged before the welcome, which startDevIn
	// waited for.
	stop()
	var started string
	for line := range strings.Lines(stderr.String()) {
		if len(line) > maxStartLine {
			t.Errorf("a line of %d characters at info level, want at most %d: %.200s...", len(line), maxStartLine, line)
		}
		if strings.Contains(line, "effective configuration") {
			t.Errorf("the effective configuration is logged at info level: %.200s...", line)
		}
		if strings.Contains(line, "skein dev started") {
			started = line
		}
	}
	for _, want := range []string{"http=127.0.0.1:", "data_dir=" + data + " ", "sandbox=warn ", "agents="} {
		if !strings.Contains(started, want) {
			t.Errorf("the start line lacks %q: %s", want, started)
		}
	}
}

// TestDevPrintConfig: --print-config prints every flag with the value
// skein dev would run with, secrets redacted, and starts nothing.
func TestDevPrintConfig(t *testing.T) {
	project, err := filepath.EvalSymlinks(testutil.TempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "data")
	var stdout, stderr testutil.Buffer
	args := []string{"--data", data, "--print-config", "--gateway.insecure-no-auth", "--nats-listen", "127.0.0.1:0"}
	if err := runDev(t.Context(), args, func(string) string { return "" }, project, &stdout, &stderr); err != nil {
		t.Fatalf("skein dev --print-config: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"adapter-runner.data-dir=" + filepath.Join(data, "sessions") + "\n",
		"adapter-runner.sandbox=warn\n",
		"adapter-runner.workspace-grants=default=" + project + "\n",
		"data=" + data + "\n",
		"gateway.insecure-no-auth=true\n",
		"nats-listen=127.0.0.1:0\n",
		"print-config=true\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--print-config lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(stdout.String()+stderr.String(), "HTTP") {
		t.Errorf("--print-config started skein dev:\n%s\n%s", stdout.String(), stderr.String())
	}
}

// TestServePrintConfig: skein serve prints its configuration the same way,
// with a secret in a URL redacted.
func TestServePrintConfig(t *testing.T) {
	var stdout, stderr testutil.Buffer
	args := []string{"--print-config", "--target", "gateway", "--nats", "nats://alice:hunter2@127.0.0.1:1"}
	if err := runServe(t.Context(), args, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatalf("skein serve --print-config: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "target=gateway\n") || !strings.Contains(out, "nats=nats://alice:xxxxx@127.0.0.1:1\n") || strings.Contains(out, "hunter2") {
		t.Errorf("--print-config printed:\n%s\nwant target=gateway and the NATS URL without its password", out)
	}
}

// TestPrintConfigRedacts: a secret flag is redacted, and a value that
// needs it is quoted.
func TestPrintConfigRedacts(t *testing.T) {
	fs := newFlagSetForTest(t, "-gateway.token", "hunter2", "-session.default-cwd", "/a b")
	var out strings.Builder
	if err := printConfig(&out, fs, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "gateway.token=[redacted]\nsession.default-cwd=\"/a b\"\n"; got != want {
		t.Errorf("printConfig = %q, want %q", got, want)
	}
}

// newFlagSetForTest returns a flag set of two string flags parsed from args.
func newFlagSetForTest(t *testing.T, args ...string) *flag.FlagSet {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("gateway.token", "", "")
	fs.String("session.default-cwd", "", "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}
