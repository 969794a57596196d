package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"skein.dev/internal/natstest"
	"skein.dev/internal/stacktest"
	"skein.dev/internal/testutil"
)

// withPayload runs the gateway's NATS server with max_payload n.
func withPayload(n int32) func(*envOptions) {
	return func(o *envOptions) {
		o.server = func(t *testing.T) (*server.Server, *nats.Conn) {
			srv := natstest.Run(t, natstest.WithMaxPayload(n))
			return srv, natstest.Connect(t, srv, nats.Timeout(stacktest.ConnectTimeout))
		}
	}
}

// largeSession opens s1 and stores three answers of one chunk and one of
// five (testutil.LargeScale: 4 MB and 20 MB in make test-long), in records
// that each fit a NATS message, as the session service stores a message
// larger than one, and returns every durable event's sequence and the
// agent's text, in order.
func largeSession(t *testing.T, e *env, chunk int) ([]uint64, []int) {
	t.Helper()
	e.backend.Open("s1", "demo")
	big := fmt.Sprintf("big %d", chunk)
	var seqs []uint64
	for range 3 {
		seqs = append(seqs, e.backend.Turn("s1", big)...)
	}
	seqs = append(seqs, e.backend.Turn("s1", strings.Repeat(big+"\n", 5))...)
	return seqs, []int{chunk, chunk, chunk, 5 * chunk}
}

// largePage is GET .../history's body, as far as these tests read it.
type largePage struct {
	Events []struct {
		Sequence uint64          `json:"sequence"`
		Type     string          `json:"type"`
		Content  json.RawMessage `json:"content"`
	} `json:"events"`
	HasMoreBefore bool `json:"hasMoreBefore"`
	HasMoreAfter  bool `json:"hasMoreAfter"`
}

// agentBytes is the length of an agent message event's text.
func agentBytes(content json.RawMessage) int {
	var c struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(content, &c)
	return len(c.Text)
}

// A session of large messages is read back by every viewer: its history
// paged both ways at any limit, and replayed by an event stream and by
// watch from the start.
func TestLargeMessagesReadBack(t *testing.T) {
	maxPayload, chunk := testutil.LargeScale()
	e := newEnv(t, withPayload(maxPayload))
	seqs, answers := largeSession(t, e, chunk)
	total := 0
	for _, n := range answers {
		total += n
	}

	for _, limit := range []int{1, 6, 7, 100, 10000} {
		for _, forward := range []bool{true, false} {
			t.Run(fmt.Sprintf("history limit=%d forward=%v", limit, forward), func(t *testing.T) {
				var got []uint64
				text := 0
				query := "?after=0"
				if !forward {
					query = "?"
				}
				for range 1000 {
					r := e.do(http.MethodGet, "/v1/sessions/s1/history"+query+"&limit="+strconv.Itoa(limit), "")
					if r.status != http.StatusOK {
						t.Fatalf("GET history%s = %d %s", query, r.status, r.body)
					}
					var p largePage
					if err := json.Unmarshal(r.body, &p); err != nil {
						t.Fatal(err)
					}
					if len(p.Events) == 0 || len(p.Events) > limit {
						t.Fatalf("GET history%s: %d events, want 1 to %d", query, len(p.Events), limit)
					}
					var page []uint64
					for _, ev := range p.Events {
						page = append(page, ev.Sequence)
						if ev.Type == "agent_message_chunk" {
							text += agentBytes(ev.Content)
						}
					}
					if forward {
						got = append(got, page...)
						if !p.HasMoreAfter {
							break
						}
						query = "?after=" + strconv.FormatUint(page[len(page)-1], 10)
					} else {
						got = append(page, got...)
						if !p.HasMoreBefore {
							break
						}
						query = "?before=" + strconv.FormatUint(page[0], 10)
					}
				}
				if !slices.Equal(got, seqs) || text != total {
					t.Errorf("read %v (%d bytes of answers), want %v (%d)", got, text, seqs, total)
				}
			})
		}
	}

	t.Run("events", func(t *testing.T) {
		s := e.stream("/v1/sessions/s1/events?after=0")
		text := 0
		for _, seq := range seqs {
			if p := wantDurable(t, s.next(), seq); p.Type == "agent_message_chunk" {
				text += agentBytes(p.Content)
			}
		}
		if text != total {
			t.Errorf("the stream replayed %d bytes of answers, want %d", text, total)
		}
	})

	t.Run("watch", func(t *testing.T) {
		var got []uint64
		after := uint64(0)
		for len(got) < len(seqs) {
			w := e.watch(t, "s1", "?timeout=1s&after="+strconv.FormatUint(after, 10))
			if len(w.Events) == 0 {
				t.Fatalf("watch after %d answered no event, want the next of %v", after, seqs)
			}
			for _, ev := range w.Events {
				got = append(got, ev.Sequence)
			}
			after = *w.Cursor
		}
		if !slices.Equal(got, seqs) {
			t.Errorf("watch read %v, want %v", got, seqs)
		}
	})
}
