package cli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"skein.dev/cmd/skein/internal/cli"
)

// attack is what an agent prints to take over the terminal of whoever
// reads its session: an OSC 8 hyperlink whose text is not its address, a
// window title, a screen clear and a cursor home, a carriage return and a
// backspace that overwrite what came before, a C1 CSI, a NUL, and a bidi
// override.
const attack = "\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07 \x1b]0;pwned\x07 \x1b[2J\x1b[H fake\rreal b\bX \u009b31m red \x00 \u202eexe.pdf"

// rawControls counts what a terminal would act on in out: C0 controls but
// newline and tab, DEL, C1 controls and bidi overrides.
func rawControls(out string) int {
	n := 0
	for _, r := range out {
		if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0) || r == '\u202e' {
			n++
		}
	}
	return n
}

// What an agent writes (its messages, tool titles, file names) once
// reached the terminal raw through skein prompt, history, files and
// events: an agent could rewrite what the user saw, set the window's title,
// or show one link and open another. The CLI prints it visibly, in caret
// notation, as gh does.
func TestSecurityCLIShowsAgentEscapesInert(t *testing.T) {
	e := newEnv(t)
	dir := e.WorkDir("evil")
	e.open("s1", "plain", "--cwd", dir)
	for _, name := range []string{"a\x1b[2Jb.txt", "x\rfake.txt", "\x1b]8;;https:evil.example\x07click\x1b]8;;\x07", "b\u009b1m", "invoice\u202efdp.exe"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := "say " + strconv.Quote(attack) + "\n" +
		"tool t1 " + strconv.Quote("run "+attack) + "\n" +
		"toolstep t1 completed " + strconv.Quote(attack) + "\n" +
		`update {"sessionUpdate":"plan","entries":[{"content":` + jsonString(t, attack) + `,"priority":"high","status":"pending"}]}`
	runs := map[string][]string{
		"prompt":         {"prompt", "-s", "s1", script},
		"history":        {"history", "-s", "s1"},
		"history --json": {"history", "-s", "s1", "--json"},
		"files":          {"files", "-s", "s1"},
		"list":           {"list"},
		"list --json":    {"list", "--json"},
	}
	order := []string{"prompt", "history", "history --json", "files", "list", "list --json"}
	total := 0
	for _, name := range order {
		r := e.run(t.Context(), "", runs[name]...)
		if r.err != nil {
			t.Fatalf("%s: %v\nstderr: %s", name, r.err, r.stderr)
		}
		if n := rawControls(r.stdout + r.stderr); n > 0 {
			total += n
			t.Errorf("skein %s printed %d raw control characters: %q", name, n, r.stdout+r.stderr)
		}
		switch name {
		case "prompt":
			for _, want := range []string{"^[]8;;http://evil.example/^Gclick^[]8;;^G", "^[]0;pwned^G", "^[[2J^[[H", "fake^Mreal", "b^HX", "^[31m", "^@", "<U+202E>exe.pdf"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("skein prompt does not show %q: %q", want, r.stdout)
				}
			}
		case "files":
			for _, want := range []string{"a^[[2Jb.txt", "x^Mfake.txt", "^[]8;;https:evil.example^Gclick^[]8;;^G", "b^[1m", "invoice<U+202E>fdp.exe"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("skein files does not show %q: %q", want, r.stdout)
				}
			}
		}
	}
	t.Logf("raw control characters printed: %d", total)
	// On a terminal the printer draws its own colours and region (SGR,
	// cursor moves, a carriage return), but never an OSC, a bell, a
	// backspace or a C1 control: any of them would be the agent's.
	out, err := e.runOnTerminal(t, "prompt", "-s", "s1", script)
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{"\x1b]", "\x07", "\x08", "\u009b", "\x00", "\u202e", "\x1b[2J", "\x1b[H"} {
		if strings.Contains(out, raw) {
			t.Errorf("skein prompt on a terminal printed %q raw: %q", raw, out)
		}
	}
	if !strings.Contains(out, "^[]8;;http://evil.example/^Gclick") {
		t.Errorf("skein prompt on a terminal does not show the hyperlink inert: %q", out)
	}
}

// skein download writes a file's bytes as they are where they go to a
// file or a pipe. To a terminal it shows a text file inert (caret
// notation), refuses a binary one as curl does, and writes the bytes as
// they are with --output -.
func TestSecurityDownloadToTerminal(t *testing.T) {
	e := newEnv(t)
	dir := e.WorkDir("dl")
	e.open("s1", "plain", "--cwd", dir)
	text := []byte("line one\n" + strings.ReplaceAll(attack, "\x00", "") + "\nend\r\n")
	binary := append([]byte("\x7fELF"), make([]byte, 64)...)
	for name, b := range map[string][]byte{"text.txt": text, "a.out": binary} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A pipe: the bytes.
	if r := e.run(t.Context(), "", "download", "-s", "s1", "text.txt"); r.err != nil || r.stdout != string(text) {
		t.Errorf("download to a pipe = %v, %q; want the file's bytes", r.err, r.stdout)
	}
	// A terminal: the text inert, nothing binary.
	out, err := e.runOnTerminal(t, "download", "-s", "s1", "text.txt")
	if err != nil || rawControls(out) > 0 || !strings.Contains(out, "^[]8;;http://evil.example/^Gclick") || !strings.HasSuffix(out, "end\n") {
		t.Errorf("download of a text file to a terminal = %v, %q: want it shown inert, %d raw controls", err, out, rawControls(out))
	}
	out, err = e.runOnTerminal(t, "download", "-s", "s1", "a.out")
	if err == nil || !strings.Contains(err.Error(), "binary output") || out != "" {
		t.Errorf("download of a binary file to a terminal = %v, printed %q; want it refused, nothing printed", err, out)
	}
	out, err = e.runOnTerminal(t, "download", "-s", "s1", "--output", "-", "a.out")
	if err != nil || out != string(binary) {
		t.Errorf("download --output - to a terminal = %v, %q; want the bytes as they are", err, out)
	}
}

func jsonString(t *testing.T, s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runOnTerminal runs `skein args...` with its standard output on a pseudo
// terminal (with no output processing, so that what is read is what was
// written), and returns what it printed there.
func (e *env) runOnTerminal(t *testing.T, args ...string) (string, error) {
	t.Helper()
	master, slave := openPTY(t)
	read := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(master) // ends in EIO once the slave is closed
		read <- b
	}()
	var stderr bytes.Buffer
	err := execute(t.Context(), map[string]string{cli.EnvServer: e.url}, "", slave, &stderr, args...)
	slave.Close()
	out := <-read
	master.Close()
	if err != nil && stderr.Len() > 0 {
		err = fmt.Errorf("%w (stderr %q)", err, stderr.String())
	}
	return string(out), err
}

func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo terminals: %v", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(slave.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	return master, slave
}

// FuzzVisible: what Visible returns holds nothing a terminal acts on, and
// is the same whether written at once or split anywhere through the
// download's writer.
func FuzzVisible(f *testing.F) {
	for _, s := range []string{"", "plain", attack, "a\r\nb", "a\r", "\r", "é\u200d", "👩\u200d💻", "\xff\xfe", "\xe2\x80", "\u009b"} {
		f.Add(s, uint8(1))
	}
	f.Fuzz(func(t *testing.T, s string, split uint8) {
		v := cli.Visible(s)
		if n := rawControls(v); n > 0 || !utf8.ValidString(v) {
			t.Fatalf("Visible(%q) = %q: %d raw controls", s, v, n)
		}
		if cli.Visible(v) != v {
			t.Fatalf("Visible(Visible(%q)) = %q, want %q", s, cli.Visible(v), v)
		}
		var b bytes.Buffer
		w := cli.NewVisibleWriter(&b)
		for rest := []byte(s); len(rest) > 0; {
			n := min(len(rest), int(split%7)+1)
			if _, err := w.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if err := w.Close(); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if b.String() != v {
			t.Fatalf("written in pieces of %d, %q shows as %q, at once as %q", int(split%7)+1, s, b.String(), v)
		}
	})
}
