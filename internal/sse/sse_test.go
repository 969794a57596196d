package sse

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestNext(t *testing.T) {
	in := ": keepalive\n\nid: 7\nevent: durable\ndata: {\"a\":1}\n\nevent: state\r\ndata: x\r\ndata: y\r\n\r\nretry: 5\nevent: ephemeral\ndata:z\n\n"
	r := NewReader(strings.NewReader(in))
	want := []Event{{ID: "7", Name: "durable", Data: []byte(`{"a":1}`)}, {Name: "state", Data: []byte("x\ny")}, {Name: "ephemeral", Data: []byte("z")}}
	for _, w := range want {
		ev, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.ID != w.ID || ev.Name != w.Name || string(ev.Data) != string(w.Data) {
			t.Errorf("event %+v, want %+v", ev, w)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the last event: %v, want io.EOF", err)
	}
}

func FuzzNext(f *testing.F) {
	f.Add([]byte("id: 1\nevent: durable\ndata: x\n\n"))
	f.Add([]byte(":\n\ndata\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(strings.NewReader(string(b)))
		for range 1000 {
			if _, err := r.Next(); err != nil {
				return
			}
		}
	})
}
