package history

import "skein.dev/pkg/events/eventlog"

// A page's byte budget. The page travels in one NATS reply, which the
// connection's max_payload bounds; so does each record, written as one
// message, whose entry in a page is its payload and an envelope (session
// ID, sequence, time, event number). A page holds what fits the budget
// with each entry's envelope, and with includeState the state changes
// around it, counted generously: an estimate that errs gives a page the
// transport chunks (rpc.RequestChunked), not a lost reply.
const (
	// replyReserve is kept back from max_payload for the reply's own
	// envelope and headers.
	replyReserve = 4 << 10
	// entryEnvelope is an entry's bytes beyond its payload and session ID.
	entryEnvelope = 160
	// stateEntries is what the state changes beside one event may take
	// (includeState): a change before it and one after, each well under
	// 512 bytes.
	stateEntries = 1 << 10
)

// budget bounds one page.
type budget struct {
	// payload bounds the records' payloads, as eventlog reads them.
	payload int
	// perEntry is what each entry adds to its payload.
	perEntry int
}

// pageBudget is the budget of a page on this service's connection.
func (s *Service) pageBudget(includeState bool) budget {
	b := budget{payload: max(int(s.nc.MaxPayload())-replyReserve, 1), perEntry: entryEnvelope}
	if includeState {
		b.perEntry += stateEntries
	}
	return b
}

// fitForward is how many of recs, from the first, fit the budget with
// their envelopes: at least one, if any.
func (b budget) fitForward(sid string, recs []*eventlog.Record) int {
	total := 0
	for i, r := range recs {
		total += len(r.Data) + b.perEntry + len(sid)
		if i > 0 && total > b.payload {
			return i
		}
	}
	return len(recs)
}

// fitBackward is how many of recs, from the last, fit the budget with
// their envelopes: at least one, if any.
func (b budget) fitBackward(sid string, recs []*eventlog.Record) int {
	total := 0
	for i := range recs {
		total += len(recs[len(recs)-1-i].Data) + b.perEntry + len(sid)
		if i > 0 && total > b.payload {
			return i
		}
	}
	return len(recs)
}
