package acpwire_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"skein.dev/pkg/acp/acpwire"
)

// updateLine returns a session/update line of about size bytes: one
// agent_message_chunk whose text fills it up.
func updateLine(size int) []byte {
	const head = `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"cf6294ee-d558-43bf-b9f0-616cc3031a37","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"`
	const tail = `"},"messageId":"msg_mock_1"}}}`
	n := max(size-len(head)-len(tail), 0)
	return []byte(head + strings.Repeat("a", n) + tail)
}

func BenchmarkParse(b *testing.B) {
	for _, size := range []int{256, 4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			line := updateLine(size)
			b.ReportAllocs()
			b.SetBytes(int64(len(line)))
			for b.Loop() {
				if _, err := acpwire.Parse(line); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseSessionUpdate(b *testing.B) {
	m, err := acpwire.Parse(updateLine(4 << 10))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(m.Params)))
	for b.Loop() {
		if _, err := acpwire.ParseSessionUpdate(m.Params); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSessionUpdateLine measures the runner's reading of one
// session/update line: Parse, then its params' routing members, read
// again with validation (ParseSessionUpdate) or without it
// (Message.SessionUpdate, what the runner calls).
func BenchmarkSessionUpdateLine(b *testing.B) {
	for _, size := range []int{256, 4 << 10, 64 << 10} {
		line := updateLine(size)
		for _, read := range []struct {
			name string
			fn   func(*acpwire.Message) (*acpwire.SessionUpdate, error)
		}{
			{"ParseSessionUpdate", func(m *acpwire.Message) (*acpwire.SessionUpdate, error) { return acpwire.ParseSessionUpdate(m.Params) }},
			{"Message.SessionUpdate", (*acpwire.Message).SessionUpdate},
		} {
			b.Run(fmt.Sprintf("size=%d/%s", size, read.name), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(line)))
				for b.Loop() {
					m, err := acpwire.Parse(line)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := read.fn(m); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// echoAgent answers every request on r with its params as the result,
// until r ends.
func echoAgent(r io.Reader, w io.Writer) {
	br := bufio.NewReaderSize(r, 1<<20)
	bw := bufio.NewWriter(w)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		m, err := acpwire.Parse(line[:len(line)-1])
		if err != nil || m.Kind() != acpwire.KindRequest {
			continue
		}
		fmt.Fprintf(bw, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", m.ID, m.Params)
		if bw.Flush() != nil {
			return
		}
	}
}

// BenchmarkRoundTrip measures one Call answered by an in-memory agent over
// io.Pipe: encode, write, agent parse and answer, read, parse, correlate.
func BenchmarkRoundTrip(b *testing.B) {
	for _, size := range []int{64, 4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("payload=%d", size), func(b *testing.B) {
			a2cR, a2cW := io.Pipe()
			c2aR, c2aW := io.Pipe()
			go echoAgent(c2aR, a2cW)
			c := acpwire.NewConn(a2cR, c2aW, acpwire.Options{})
			b.Cleanup(func() {
				c.Close()
				a2cW.Close()
				<-c.Done()
			})
			params := json.RawMessage(`{"text":"` + strings.Repeat("a", size) + `"}`)
			b.ReportAllocs()
			b.SetBytes(int64(len(params)))
			for b.Loop() {
				if _, err := c.Call(b.Context(), "_bench/echo", params); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNotifications measures the reader alone: a stream of 1 KiB
// session/update lines dispatched to OnNotification. The pipe is
// synchronous, so the writer below runs at the reader's pace.
func BenchmarkNotifications(b *testing.B) {
	line := append(updateLine(1<<10), '\n')
	pr, pw := io.Pipe()
	var n int
	c := acpwire.NewConn(pr, io.Discard, acpwire.Options{OnNotification: func(*acpwire.Message) { n++ }})
	bw := bufio.NewWriterSize(pw, 64<<10)
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		bw.Write(line)
	}
	bw.Flush()
	pw.Close()
	<-c.Done()
	if n != b.N {
		b.Errorf("%d notifications delivered, want %d", n, b.N)
	}
}
