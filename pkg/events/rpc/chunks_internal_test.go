package rpc

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
)

// chunked splits body into n chunk messages as publishChunks does.
func chunked(body []byte, n int) []*nats.Msg {
	size := (len(body) + n - 1) / n
	var out []*nats.Msg
	for i := range n {
		part := body[min(i*size, len(body)):min((i+1)*size, len(body))]
		out = append(out, &nats.Msg{Data: part, Header: nats.Header{events.HeaderChunk: []string{strconv.Itoa(i+1) + "/" + strconv.Itoa(n)}}})
	}
	return out
}

func TestChunkReader(t *testing.T) {
	body := []byte("0123456789abcdef")
	var r chunkReader
	var got *nats.Msg
	for i, m := range chunked(body, 3) {
		reply, err := r.add(m)
		if err != nil {
			t.Fatalf("chunk %d: %v", i+1, err)
		}
		if (reply != nil) != (i == 2) {
			t.Fatalf("chunk %d: reply %v", i+1, reply)
		}
		got = reply
	}
	if !bytes.Equal(got.Data, body) {
		t.Errorf("reassembled %q, want %q", got.Data, body)
	}
	for _, tc := range []struct {
		name    string
		headers []string
	}{
		{"out of order", []string{"2/3"}},
		{"a gap", []string{"1/3", "3/3"}},
		{"n changes", []string{"1/3", "2/4"}},
		{"zero", []string{"0/3"}},
		{"past n", []string{"4/3"}},
		{"too many", []string{"1/1025"}},
		{"not a number", []string{"a/b"}},
		{"no slash", []string{"1"}},
		{"whole after a chunk", []string{"1/2", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r chunkReader
			var err error
			for _, h := range tc.headers {
				m := &nats.Msg{Data: []byte("x"), Header: nats.Header{}}
				if h != "" {
					m.Header.Set(events.HeaderChunk, h)
				}
				if _, err = r.add(m); err != nil {
					break
				}
			}
			if events.AsError(err).Code != events.CodeInvalidPayload {
				t.Errorf("%v = %v, want %s", tc.headers, err, events.CodeInvalidPayload)
			}
		})
	}
}

// FuzzChunkReader: whatever the headers of the messages a reply inbox
// receives, the reader never panics, returns a reply only once every
// chunk 1..n came in order, and holds no more bytes than they carried.
func FuzzChunkReader(f *testing.F) {
	f.Add("1/2", "2/2", "", []byte("ab"))
	f.Add("", "", "", []byte("whole"))
	f.Add("1/1024", "2/1024", "3/1024", []byte{})
	f.Add("-1/2", "1/0", "+1/+1", []byte("x"))
	f.Fuzz(func(t *testing.T, h1, h2, h3 string, data []byte) {
		var r chunkReader
		total := 0
		for _, h := range []string{h1, h2, h3} {
			m := &nats.Msg{Data: data, Header: nats.Header{}}
			if h != "" {
				m.Header.Set(events.HeaderChunk, h)
			}
			total += len(data)
			reply, err := r.add(m)
			if err != nil {
				return
			}
			if reply != nil {
				if len(reply.Data) > total {
					t.Fatalf("a reply of %d bytes from %d received", len(reply.Data), total)
				}
				if h != "" && r.got != r.n {
					t.Fatalf("a reply after chunk %d of %d", r.got, r.n)
				}
				return
			}
		}
	})
}
