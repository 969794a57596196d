package acpwire_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"testing"
	"time"

	"skein.dev/pkg/acp/acpwire"
)

// agentSide is the adapter's end of a Conn built by newPipeConn: the test
// writes the adapter's stdout and reads what the Conn wrote to its stdin.
type agentSide struct {
	out   *io.PipeWriter
	lines chan []byte // C->A lines, without '\n'; closed at EOF
}

// newPipeConn returns a Conn talking to an in-memory adapter over io.Pipe.
// The Conn is closed, and its reader waited for, when the test ends.
func newPipeConn(tb testing.TB, opts acpwire.Options) (*acpwire.Conn, *agentSide) {
	tb.Helper()
	a2cR, a2cW := io.Pipe()
	c2aR, c2aW := io.Pipe()
	c := acpwire.NewConn(a2cR, c2aW, opts)
	a := &agentSide{out: a2cW, lines: make(chan []byte, 1024)}
	go func() {
		defer close(a.lines)
		br := bufio.NewReader(c2aR)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				a.lines <- bytes.TrimSuffix(line, []byte("\n"))
			}
			if err != nil {
				return
			}
		}
	}()
	tb.Cleanup(func() {
		c.Close()
		a2cW.Close()
		c2aR.Close()
		waitDone(tb, c)
	})
	return c, a
}

// send writes one line of adapter output.
func (a *agentSide) send(tb testing.TB, line []byte) {
	tb.Helper()
	if _, err := a.out.Write(append(slices.Clip(line), '\n')); err != nil {
		tb.Errorf("adapter write: %v", err)
	}
}

// recv returns the next line the Conn wrote. The timer only turns a hang
// into a failure.
func (a *agentSide) recv(tb testing.TB) []byte {
	tb.Helper()
	select {
	case line, ok := <-a.lines:
		if !ok {
			tb.Fatal("adapter stdin closed, want a line")
		}
		return line
	case <-time.After(10 * time.Second):
		tb.Fatal("no line from the Conn after 10s")
		return nil
	}
}

// expect receives the next callback event and compares it with want.
func expect(tb testing.TB, ch <-chan event, want event) {
	tb.Helper()
	select {
	case got := <-ch:
		if got != want {
			tb.Errorf("callback = %+v, want %+v", got, want)
		}
	case <-time.After(10 * time.Second):
		tb.Fatalf("no callback after 10s, want %+v", want)
	}
}

// notReplayable says why a transcript cannot be replayed with a Conn acting
// as the client, or "" if it can: every client line must parse, and the
// client's requests must use the ids a Conn allocates (0, 1, 2, ...).
// Adapter lines that do not parse are fine: they must reach OnProtocolError.
func notReplayable(tr transcript) string {
	next := 0
	for _, l := range tr.Lines {
		if l.Dir == "A->C" {
			continue
		}
		m, err := acpwire.Parse(l.JSON)
		if err != nil {
			return l.String() + ": client line does not parse (cut short by the recorder or not JSON)"
		}
		if m.Kind() == acpwire.KindRequest {
			if string(m.ID) != strconv.Itoa(next) {
				return l.String() + ": client request id " + string(m.ID) + " is not " + strconv.Itoa(next)
			}
			next++
		}
		if m.Method != "" && m.Params == nil {
			return l.String() + ": client message without params"
		}
	}
	return ""
}

// TestReplayTranscripts replays whole conversations: the test plays the
// adapter from the recorded A->C lines, and drives the client side through
// the Conn's API from the recorded C->A lines (CallAsync, Notify, Respond).
// Every line the Conn writes must equal the recorded one byte for byte, and
// every recorded adapter line must reach the right callback in order, with
// CallAsync's done right after OnResponse.
func TestReplayTranscripts(t *testing.T) {
	var replayed int
	for _, tr := range readTranscripts(t) {
		why := notReplayable(tr)
		if why == "" {
			replayed++
		}
		t.Run("file="+tr.Name, func(t *testing.T) {
			if why != "" {
				t.Skip(why)
			}
			t.Parallel()
			replay(t, tr)
		})
	}
	if replayed < 20 {
		t.Errorf("replayed %d transcripts, want at least 20", replayed)
	}
}

func replay(t *testing.T, tr transcript) {
	rec := &recorder{ch: make(chan event, 1024)}
	c, agent := newPipeConn(t, rec.options())
	outstanding := map[string]bool{}
	for _, l := range tr.Lines {
		m, err := acpwire.Parse(l.JSON)
		raw := string(l.JSON)
		if l.Dir == "A->C" {
			agent.send(t, l.JSON)
			if err != nil {
				expect(t, rec.ch, event{"protocol-error", raw})
				continue
			}
			expect(t, rec.ch, event{m.Kind().String(), raw})
			if m.Kind() == acpwire.KindResponse && outstanding[string(m.ID)] {
				expect(t, rec.ch, event{"done", raw})
				delete(outstanding, string(m.ID))
			}
			continue
		}
		switch m.Kind() {
		case acpwire.KindRequest:
			id, err := c.CallAsync(m.Method, json.RawMessage(m.Params), rec.done())
			if err != nil || string(id) != string(m.ID) {
				t.Fatalf("%v: CallAsync = %s, %v, want id %s", l, id, err, m.ID)
			}
			outstanding[string(id)] = true
		case acpwire.KindNotification:
			err = c.Notify(m.Method, json.RawMessage(m.Params))
		case acpwire.KindResponse:
			if m.Error != nil {
				err = c.RespondError(m.ID, m.Error)
			} else {
				err = c.Respond(m.ID, json.RawMessage(m.Result))
			}
		}
		if err != nil {
			t.Fatalf("%v: sending the client's line: %v", l, err)
		}
		if got := agent.recv(t); !bytes.Equal(got, l.JSON) {
			t.Errorf("%v: Conn wrote\n%s\nwant\n%s", l, got, l.JSON)
		}
	}

	// The adapter exits: calls it never answered end with a synthesized
	// error, in id order, before Done.
	agent.out.Close()
	waitDone(t, c)
	var ids []int
	for id := range outstanding {
		n, _ := strconv.Atoi(id)
		ids = append(ids, n)
	}
	slices.Sort(ids)
	for _, id := range ids {
		expect(t, rec.ch, event{"done-ended", strconv.Itoa(id)})
	}
	select {
	case e := <-rec.ch:
		t.Errorf("unexpected callback after the transcript: %+v", e)
	default:
	}
	if err := c.Err(); !errors.Is(err, acpwire.ErrClosed) {
		t.Errorf("Err() = %v, want %s", err, acpwire.ErrClosed)
	}
}
