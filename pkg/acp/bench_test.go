package acp_test

import (
	"fmt"
	"strings"
	"testing"

	"skein.dev/pkg/acp"
)

// chunk returns an agent_message_chunk update of about size bytes.
func chunk(size int) []byte {
	const head = `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"`
	const tail = `"},"messageId":"msg_mock_1","_meta":{"x":1}}`
	return []byte(head + strings.Repeat("a", max(size-len(head)-len(tail), 0)) + tail)
}

// configOption is a select config option as agents send them.
var configOption = []byte(`{"id":"model","name":"Model","description":"The model to use","category":"model","type":"select",` +
	`"currentValue":"sonnet","options":[{"value":"sonnet","name":"Sonnet"},{"value":"opus","name":"Opus"},{"value":"haiku","name":"Haiku"}]}`)

func BenchmarkMembers(b *testing.B) {
	for _, size := range []int{256, 4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			obj := chunk(size)
			b.ReportAllocs()
			b.SetBytes(int64(len(obj)))
			for b.Loop() {
				n := 0
				if err := acp.Members(obj, func(acp.Key, []byte) error { n++; return nil }); err != nil || n != 4 {
					b.Fatal(n, err)
				}
			}
		})
	}
}

func BenchmarkMember(b *testing.B) {
	obj := chunk(4 << 10)
	b.ReportAllocs()
	b.SetBytes(int64(len(obj)))
	for b.Loop() {
		if _, ok, err := acp.Member(obj, "messageId"); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkParseUpdate(b *testing.B) {
	obj := chunk(256)
	b.ReportAllocs()
	b.SetBytes(int64(len(obj)))
	for b.Loop() {
		if _, err := acp.ParseUpdate(obj); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWithoutMember(b *testing.B) {
	req := []byte(`{"sessionId":"cf6294ee-d558-43bf-b9f0-616cc3031a37","toolCall":{"toolCallId":"toolu_01","title":"Write /tmp/x","kind":"edit"},` +
		`"options":[{"kind":"allow_always","name":"Always Allow","optionId":"allow_always"},{"kind":"allow_once","name":"Allow","optionId":"allow"},{"kind":"reject_once","name":"Reject","optionId":"reject"}]}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(req)))
	for b.Loop() {
		if out := acp.WithoutMember(req, "sessionId"); len(out) == len(req) {
			b.Fatal("nothing removed")
		}
	}
}

func BenchmarkWithMember(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(configOption)))
	for b.Loop() {
		if out := acp.WithMember(configOption, "currentValue", []byte(`"opus"`)); len(out) != len(configOption)-2 {
			b.Fatal(string(out))
		}
	}
}
