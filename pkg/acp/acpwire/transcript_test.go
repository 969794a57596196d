package acpwire_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"skein.dev/pkg/acp/acpwire"
)

var update = flag.Bool("update", false, "rewrite testdata/transcripts.golden")

const (
	transcriptDir = "testdata/transcripts"
	goldenFile    = "testdata/transcripts.golden"
	// sharedDir is the original of transcriptDir in the Skein work tree.
	sharedDir = "../../../shared/acp/transcripts"
)

// wireLine is one JSON-RPC line of a transcript.
type wireLine struct {
	File   string
	LineNo int    // 1-based line number in the file
	Dir    string // "A->C" (agent to client, read by a Conn) or "C->A"
	JSON   []byte
}

func (l wireLine) String() string { return fmt.Sprintf("%s:%d", l.File, l.LineNo) }

// lineRE matches "  144 A->C {json}"; the time is absent in some logs
// (run-gosdk-probe.log). STDERR lines and notes do not match.
var lineRE = regexp.MustCompile(`^\s*(?:\d+\s+)?(A->C|C->A) (.*)$`)

// transcript is one log file's wire lines.
type transcript struct {
	Name  string
	Lines []wireLine
}

// readTranscripts returns every transcript in testdata, sorted by name.
func readTranscripts(tb testing.TB) []transcript {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(transcriptDir, "*.log"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(paths) == 0 {
		tb.Fatalf("no transcripts in %s", transcriptDir)
	}
	var out []transcript
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		tr := transcript{Name: filepath.Base(p)}
		for i, text := range strings.Split(string(data), "\n") {
			if m := lineRE.FindStringSubmatch(text); m != nil {
				tr.Lines = append(tr.Lines, wireLine{File: tr.Name, LineNo: i + 1, Dir: m[1], JSON: []byte(m[2])})
			}
		}
		out = append(out, tr)
	}
	return out
}

// oracleKind classifies a line with encoding/json, independently of Parse:
// it is the reference the tests hold Parse and Conn to.
func oracleKind(line []byte) (acpwire.Kind, map[string]json.RawMessage) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		return acpwire.KindInvalid, nil
	}
	_, hasID := obj["id"]
	_, hasMethod := obj["method"]
	switch {
	case hasMethod && hasID:
		return acpwire.KindRequest, obj
	case hasMethod:
		return acpwire.KindNotification, obj
	case hasID:
		return acpwire.KindResponse, obj
	}
	return acpwire.KindInvalid, obj
}

// describeLine renders what the package makes of one wire line, for the
// golden file.
func describeLine(l wireLine) string {
	m, err := acpwire.Parse(l.JSON)
	if err != nil {
		e, _ := errors.AsType[*acpwire.Error](err)
		return fmt.Sprintf("invalid kind=%q bytes=%d (%s)", e.Kind, len(l.JSON), e.Message)
	}
	var b strings.Builder
	b.WriteString(m.Kind().String())
	if m.ID != nil {
		fmt.Fprintf(&b, " id=%s", m.ID)
	}
	if m.Method != "" {
		fmt.Fprintf(&b, " method=%s", m.Method)
	}
	switch {
	case m.Method == acpwire.MethodSessionUpdate:
		u, err := acpwire.ParseSessionUpdate(m.Params)
		if err != nil {
			fmt.Fprintf(&b, " bad-update=%q", err)
			break
		}
		fmt.Fprintf(&b, " session=%s update=%s", u.SessionID, u.Kind)
		if u.MessageID != nil {
			fmt.Fprintf(&b, " messageId=%s", *u.MessageID)
		}
	case m.Method == acpwire.MethodRequestPermission:
		p, err := acpwire.ParsePermissionRequest(m.Params)
		if err != nil {
			fmt.Fprintf(&b, " bad-permission=%q", err)
			break
		}
		var opts []string
		for _, o := range p.Options {
			opts = append(opts, o.OptionID+":"+o.Kind)
		}
		fmt.Fprintf(&b, " session=%s options=%s", p.SessionID, strings.Join(opts, ","))
	case m.Error != nil:
		fmt.Fprintf(&b, " error=%d", m.Error.Code)
		if acpwire.IsUnknownSession(m.Error) {
			b.WriteString(" unknown-session")
		}
	case m.Result != nil:
		fmt.Fprintf(&b, " result=%s", shape(m.Result))
	}
	return b.String()
}

// shape renders a result for the golden file: an object as its member names
// in document order, anything else as itself.
func shape(v json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(v))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return string(v)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "?"
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "?"
		}
		if tok == "stopReason" {
			keys[len(keys)-1] += ":" + strings.Trim(string(skip), `"`)
		}
	}
	return "{" + strings.Join(keys, ",") + "}"
}

// TestTranscriptsGolden parses every wire line of every transcript and
// compares the package's reading of each with testdata/transcripts.golden
// (go test -run TestTranscriptsGolden -update rewrites it). Lines the
// recorder cut short are recorded there as invalid.
func TestTranscriptsGolden(t *testing.T) {
	var got []string
	for _, tr := range readTranscripts(t) {
		for _, l := range tr.Lines {
			got = append(got, fmt.Sprintf("%s %s %s", l, l.Dir, describeLine(l)))
		}
	}
	if *update {
		if err := os.WriteFile(goldenFile, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	want := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("transcripts differ from %s (-want +got):\n%s", goldenFile, diff)
	}
}

// TestTranscriptLines holds Parse to encoding/json on every recorded line:
// valid JSON parses, Raw is the line byte for byte, the kind is right, the
// raw members are exactly encoding/json's, and session/update and
// session/request_permission params decode.
func TestTranscriptLines(t *testing.T) {
	var parsed, invalid int
	for _, tr := range readTranscripts(t) {
		for _, l := range tr.Lines {
			wantKind, obj := oracleKind(l.JSON)
			m, err := acpwire.Parse(l.JSON)
			if wantKind == acpwire.KindInvalid {
				invalid++
				if !errors.Is(err, acpwire.ErrProtocol) {
					t.Errorf("%v: Parse(cut-short line) error = %v, want %s", l, err, acpwire.ErrProtocol)
				}
				continue
			}
			parsed++
			if err != nil {
				t.Errorf("%v: Parse = %v, want a message", l, err)
				continue
			}
			if !bytes.Equal(m.Raw, l.JSON) {
				t.Errorf("%v: Raw = %q, want the line", l, m.Raw)
			}
			if m.Kind() != wantKind {
				t.Errorf("%v: Kind() = %v, want %v", l, m.Kind(), wantKind)
			}
			for name, got := range map[string][]byte{"id": m.ID, "params": m.Params, "result": m.Result} {
				if !bytes.Equal(got, obj[name]) {
					t.Errorf("%v: %s = %q, want %q", l, name, got, obj[name])
				}
			}
			switch m.Method {
			case acpwire.MethodSessionUpdate:
				u, err := acpwire.ParseSessionUpdate(m.Params)
				if err != nil {
					t.Errorf("%v: ParseSessionUpdate = %v", l, err)
					continue
				}
				var want struct {
					Update json.RawMessage `json:"update"`
				}
				if err := json.Unmarshal(m.Params, &want); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(u.Update, want.Update) {
					t.Errorf("%v: Update = %q, want %q", l, u.Update, want.Update)
				}
			case acpwire.MethodRequestPermission:
				p, err := acpwire.ParsePermissionRequest(m.Params)
				if err != nil {
					t.Errorf("%v: ParsePermissionRequest = %v", l, err)
				} else if len(p.Options) == 0 {
					t.Errorf("%v: ParsePermissionRequest gave no options", l)
				}
			}
		}
	}
	// Guard against a regexp that silently stops matching.
	if parsed < 300 || invalid == 0 {
		t.Errorf("parsed %d lines and %d cut-short ones, want >= 300 and > 0", parsed, invalid)
	}
}

// TestTranscriptCopies checks that testdata/transcripts is an exact copy of
// shared/acp/transcripts when the work tree has it.
func TestTranscriptCopies(t *testing.T) {
	shared, err := filepath.Glob(filepath.Join(sharedDir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(shared) == 0 {
		t.Skip("../shared absent: " + sharedDir + " has no transcripts (a clone without the work tree); the copies cannot be compared")
	}
	local, err := filepath.Glob(filepath.Join(transcriptDir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	names := func(paths []string) []string {
		var out []string
		for _, p := range paths {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	if diff := cmp.Diff(names(shared), names(local)); diff != "" {
		t.Errorf("transcript files differ from %s (-shared +testdata):\n%s", sharedDir, diff)
	}
	for _, p := range shared {
		want, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(transcriptDir, filepath.Base(p)))
		if err != nil {
			t.Errorf("copy of %s: %v", p, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s: copy it again", filepath.Base(p), p)
		}
	}
}

// event is one thing a Conn handed to a callback.
type event struct {
	Kind string // notification, request, response, protocol-error, done, done-ended
	Raw  string
}

// recorder collects callback events; it is safe for the reader goroutine
// and the test goroutine.
type recorder struct {
	mu     sync.Mutex
	events []event
	ch     chan event // when non-nil, every event is also sent here
}

func (r *recorder) add(e event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	if r.ch != nil {
		r.ch <- e
	}
}

func (r *recorder) all() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// options returns Options that record every callback.
func (r *recorder) options() acpwire.Options {
	return acpwire.Options{
		OnNotification:  func(m *acpwire.Message) { r.add(event{"notification", string(m.Raw)}) },
		OnRequest:       func(m *acpwire.Message) { r.add(event{"request", string(m.Raw)}) },
		OnResponse:      func(m *acpwire.Message) { r.add(event{"response", string(m.Raw)}) },
		OnProtocolError: func(line []byte, err error) { r.add(event{"protocol-error", string(line)}) },
	}
}

// done returns a CallAsync callback that records the completion.
func (r *recorder) done() func(*acpwire.Message) {
	return func(m *acpwire.Message) {
		if m.Raw == nil {
			r.add(event{"done-ended", string(m.ID)})
			return
		}
		r.add(event{"done", string(m.Raw)})
	}
}

// waitDone waits for c's reader to stop. The timer only turns a hang into a
// failure; nothing waits on it for a condition.
func waitDone(tb testing.TB, c *acpwire.Conn) {
	tb.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		tb.Fatal("Conn.Done not closed after 10s")
	}
}

// TestTranscriptDispatch feeds the agent side of every transcript through a
// real Conn over io.Pipe and checks that each line reached the right
// callback, in order, byte for byte.
func TestTranscriptDispatch(t *testing.T) {
	for _, tr := range readTranscripts(t) {
		t.Run("file="+tr.Name, func(t *testing.T) {
			t.Parallel()
			var want []event
			pr, pw := io.Pipe()
			go func() {
				bw := bufio.NewWriter(pw)
				for _, l := range tr.Lines {
					if l.Dir == "A->C" {
						bw.Write(l.JSON)
						bw.WriteByte('\n')
					}
				}
				pw.CloseWithError(bw.Flush()) // nil: EOF
			}()
			for _, l := range tr.Lines {
				if l.Dir != "A->C" {
					continue
				}
				kind, _ := oracleKind(l.JSON)
				name := kind.String()
				if kind == acpwire.KindInvalid {
					name = "protocol-error"
				}
				want = append(want, event{name, string(l.JSON)})
			}
			var rec recorder
			c := acpwire.NewConn(pr, io.Discard, rec.options())
			waitDone(t, c)
			if diff := cmp.Diff(want, rec.all()); diff != "" {
				t.Errorf("callbacks (-want +got):\n%s", diff)
			}
			if err := c.Err(); !errors.Is(err, acpwire.ErrClosed) {
				t.Errorf("Err() = %v, want %s", err, acpwire.ErrClosed)
			}
		})
	}
}
