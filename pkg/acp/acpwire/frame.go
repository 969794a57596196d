package acpwire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// DefaultMaxLineBytes is the line limit when Options.MaxLineBytes is zero.
// Images and embedded resources travel base64-encoded inside one line, so
// the limit is generous; the Go SDK uses 10 MiB.
const DefaultMaxLineBytes = 16 << 20

// readBufferSize is the bufio buffer under the line reader. Lines longer than
// this are assembled in lineReader.long.
const readBufferSize = 64 << 10

// keepLongBuffer is the largest assembly buffer kept between lines; a bigger
// one (left by a large image) is dropped so that an idle Conn does not pin
// megabytes.
const keepLongBuffer = 1 << 20

// lineReader splits a stream into '\n'-terminated lines of at most max bytes
// (not counting the '\n'). It never holds more than max+readBufferSize bytes
// of one line: a longer line fails as soon as it crosses the limit, without
// reading the rest of it.
type lineReader struct {
	br   *bufio.Reader
	max  int
	long []byte // assembly buffer for lines longer than the bufio buffer
}

func newLineReader(r io.Reader, limit int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, readBufferSize), max: limit}
}

// next returns the next line, without its '\n', in a new slice that the
// caller owns. At the end of the stream it returns a non-nil error: an
// ErrLineTooLong *Error when a line exceeds max, else the reader's error (io.EOF at a clean end). When the stream ended after a
// non-empty line that had no '\n', next returns that line together with
// the error; the caller must not call next again after an error.
func (lr *lineReader) next() ([]byte, error) {
	lr.long = lr.long[:0]
	for {
		chunk, err := lr.br.ReadSlice('\n')
		n := len(chunk)
		if err == nil {
			n-- // the '\n'
		}
		if len(lr.long)+n > lr.max {
			lr.long = nil
			return nil, newError(ErrLineTooLong, nil, "adapter wrote a line longer than %d bytes", lr.max)
		}
		switch {
		case err == nil && len(lr.long) == 0:
			return bytes.Clone(chunk[:n]), nil
		case err == nil:
			lr.long = append(lr.long, chunk[:n]...)
			return lr.take(), nil
		case errors.Is(err, bufio.ErrBufferFull):
			lr.long = append(lr.long, chunk...)
		default:
			lr.long = append(lr.long, chunk...)
			if len(lr.long) > 0 {
				return lr.take(), err
			}
			return nil, err
		}
	}
}

// hasLine reports whether a whole line is buffered already: whether next
// returns without reading.
func (lr *lineReader) hasLine() bool {
	buf, _ := lr.br.Peek(lr.br.Buffered()) // never reads: the bytes are buffered
	return bytes.IndexByte(buf, '\n') >= 0
}

// take returns a copy of the assembled line and resets the buffer.
func (lr *lineReader) take() []byte {
	line := bytes.Clone(lr.long)
	if cap(lr.long) > keepLongBuffer {
		lr.long = nil
	} else {
		lr.long = lr.long[:0]
	}
	return line
}
