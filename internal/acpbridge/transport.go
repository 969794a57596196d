package acpbridge

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Transport carries the JSON-RPC 2.0 messages of one ACP connection
// between the bridge and its client: stdio for skein acp, a WebSocket or
// Streamable HTTP for the gateway's /acp. Each message is one JSON value.
type Transport interface {
	// Read returns the client's next message. It returns io.EOF once the
	// client is gone, and ctx's error when ctx ends first.
	Read(ctx context.Context) ([]byte, error)
	// Write sends one message to the client. The bridge never calls it
	// from two goroutines at once.
	Write(ctx context.Context, msg []byte) error
}

// MaxMessageBytes bounds one message of a client: a prompt of the largest
// size Skein takes (4 MiB of content) and its framing fit well inside.
const MaxMessageBytes = 16 << 20

// ErrMessageTooLarge is a message over MaxMessageBytes. A stream transport
// cannot find where the next message starts after it, so the connection
// ends.
var ErrMessageTooLarge = fmt.Errorf("an ACP message over %d bytes", MaxMessageBytes)

// Stdio is the stdio transport of ACP (transports.mdx): one message a
// line, newline-delimited, no embedded newlines, on the process's standard
// input and output.
type Stdio struct {
	r  *bufio.Reader
	mu sync.Mutex
	w  io.Writer
}

// NewStdio returns the transport that reads messages from r and writes
// them to w.
func NewStdio(r io.Reader, w io.Writer) *Stdio {
	return &Stdio{r: bufio.NewReaderSize(r, 64<<10), w: w}
}

// Read returns the next non-empty line. A line that never ends before the
// input does is a message still, as a client that exits without a final
// newline sent it. ctx is not watched: a read ends with the input.
func (s *Stdio) Read(ctx context.Context) ([]byte, error) {
	for {
		line, err := s.readLine()
		if len(bytes.TrimSpace(line)) > 0 {
			return line, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (s *Stdio) readLine() ([]byte, error) {
	var line []byte
	for {
		frag, err := s.r.ReadSlice('\n')
		if len(line)+len(frag) > MaxMessageBytes {
			return nil, ErrMessageTooLarge
		}
		line = append(line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), err
	}
}

// Write writes msg and a newline.
func (s *Stdio) Write(ctx context.Context, msg []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	buf := make([]byte, 0, len(msg)+1)
	buf = append(append(buf, msg...), '\n')
	_, err := s.w.Write(buf)
	return err
}
