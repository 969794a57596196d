package events_test

import (
	"fmt"
	"strings"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

// benchSizes are the sizes of the ACP JSON inside the benchmarked values:
// a short chunk, a typical tool call, a large tool output.
var benchSizes = []int{64, 4 << 10, 64 << 10}

// benchUpdate returns an agent_message_chunk update of exactly size bytes
// (at least its fixed part).
func benchUpdate(size int) events.JSON {
	const head, tail = `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"`, `"},"_meta":{"k":1}}`
	n := max(size-len(head)-len(tail), 0)
	return events.JSON(head + strings.Repeat("x", n) + tail)
}

// benchVariants returns the benchmarked values, with ACP JSON of size
// bytes: what the session service appends, what the gateway sends, what a
// live viewer receives.
func benchVariants(size int) []events.Variant {
	u := benchUpdate(size)
	return []events.Variant{
		&events.AcpDurableHistoryEntry{
			SessionID: "main", Sequence: 123456, EventNo: 789, Timestamp: "2026-11-30T07:32:37.845Z",
			Event: events.Union[events.AcpDurableEvent]{V: &events.AcpDurableSessionUpdate{Update: u}},
		},
		&events.AcpPromptRequest{SessionID: new("main"), IdempotencyKey: new("k-1"), Content: u},
		&events.AcpEphemeralSessionUpdateEvent{SessionID: "main", AfterSequence: 123456, Update: u},
	}
}

func BenchmarkMarshal(b *testing.B) {
	for _, size := range benchSizes {
		for _, v := range benchVariants(size) {
			b.Run(fmt.Sprintf("variant=%s,size=%d", v.VariantName(), size), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(size))
				for b.Loop() {
					if _, err := events.Marshal(v); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkUnmarshal(b *testing.B) {
	for _, size := range benchSizes {
		for _, v := range benchVariants(size) {
			data := mustMarshal(b, v)
			b.Run(fmt.Sprintf("variant=%s,size=%d", v.VariantName(), size), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(size))
				for b.Loop() {
					if _, err := events.Unmarshal(data); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkPublicDurableJSON(b *testing.B) {
	for _, size := range benchSizes {
		e := benchVariants(size)[0].(*events.AcpDurableHistoryEntry)
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := eventjson.Durable(e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPublicJSONType(b *testing.B) {
	for _, size := range benchSizes {
		u := benchUpdate(size)
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := eventjson.Type(u); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSubject(b *testing.B) {
	const (
		ns  events.Namespace = "team-a"
		sid events.SessionID = "799b1354-6bb3-49d3-8245-be95a8e1060c"
	)
	subjects := []struct {
		kind string
		fn   func() string
	}{
		{"log", func() string { return events.LogSubject(ns, sid, events.LogEvents) }},
		{"filter", func() string { return events.LogFilter(ns, sid) }},
		{"live", func() string { return events.LiveSubject(ns, sid) }},
		{"api", func() string { return events.APISubject(ns, events.OpPrompt) }},
		{"parse", func() string {
			id, err := events.ParseSessionID(string(sid))
			if err != nil {
				b.Fatal(err)
			}
			return string(id)
		}},
	}
	for _, s := range subjects {
		b.Run("kind="+s.kind, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = s.fn()
			}
		})
	}
}
