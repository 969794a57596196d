// Package sse reads Server-Sent Events, as the gateway's event streams
// send them (docs/API.md, The SSE stream): the client commands and the
// ACP bridge read them with it.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Event is one event of a stream.
type Event struct {
	ID   string // the id field: a durable sequence, or "" for none
	Name string // the event field: durable, ephemeral, state or error
	Data []byte // the data lines, joined by newlines
}

// Reader reads the events of a stream. Lines end in LF or CRLF (the
// gateway writes LF); comments (keep-alives) and unknown fields are
// skipped.
type Reader struct {
	r *bufio.Reader
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReader(r)} }

// Next returns the next event, or io.EOF when the stream ended at a line's
// end (an event not yet ended by its blank line is dropped).
func (r *Reader) Next() (Event, error) {
	var (
		ev   Event
		data [][]byte
		has  bool
	)
	for {
		line, err := r.r.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && len(line) == 0 {
				return Event{}, io.EOF
			}
			return Event{}, fmt.Errorf("read event stream: %w", err)
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(line) == 0 {
			if has {
				ev.Data = bytes.Join(data, []byte("\n"))
				return ev, nil
			}
			continue
		}
		if line[0] == ':' {
			continue // a comment: keepalive
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		has = true
		switch string(field) {
		case "id":
			ev.ID = string(value)
		case "event":
			ev.Name = string(value)
		case "data":
			data = append(data, value)
		}
	}
}
