package events

import (
	"bytes"

	"skein.dev/pkg/events/internal/msgpackraw"
)

// The records of a message chunk's way (AdapterUpdate, AdapterUpdates,
// AcpEphemeralSessionUpdateEvent, EphemeralUpdates) are coded by hand, as
// the library writes them (FuzzFastCodec holds it to that): its reflection
// was a sixth of Skein's CPU per chunk at 120 streaming sessions. Any
// other layout, valid or not, is decoded by the library.

// fastSize returns about how many bytes fastBody writes for v (never
// fewer), or false when v is not one of the records encoded by hand.
func fastSize(v Variant) (int, bool) {
	const item = 16 // a header, a key, a length
	switch v := v.(type) {
	case *AdapterUpdate:
		n := 64 + len(v.Update) + len(v.Kind)
		if v.MessageID != nil {
			n += len(*v.MessageID)
		}
		return n, true
	case *AdapterUpdates:
		n := 64
		for _, u := range v.Updates {
			n += item + len(u)
		}
		for _, k := range v.Kinds {
			n += item + len(k)
		}
		for _, id := range v.MessageIDs {
			n += item
			if id != nil {
				n += len(*id)
			}
		}
		return n, true
	case *AcpEphemeralSessionUpdateEvent:
		return 64 + len(v.SessionID) + len(v.Update), true
	case *EphemeralUpdates:
		n := 64 + len(v.SessionID)
		for _, u := range v.Updates {
			n += item + len(u)
		}
		return n, true
	}
	return 0, false
}

// fastBody appends v's msgpack body to b, or returns false when v is not
// one of the records encoded by hand.
func fastBody(b []byte, v Variant) ([]byte, bool) {
	switch v := v.(type) {
	case *AdapterUpdate:
		n := 1 + btoi(v.Kind != "") + btoi(v.MessageID != nil)
		b = append(b, 0x80|byte(n))
		b = msgpackraw.AppendBin(msgpackraw.AppendStr(b, "update"), v.Update)
		if v.Kind != "" {
			b = msgpackraw.AppendString(msgpackraw.AppendStr(b, "kind"), v.Kind)
		}
		if v.MessageID != nil {
			b = msgpackraw.AppendString(msgpackraw.AppendStr(b, "messageId"), *v.MessageID)
		}
	case *AdapterUpdates:
		n := 1 + btoi(len(v.Kinds) > 0) + btoi(len(v.MessageIDs) > 0)
		b = append(b, 0x80|byte(n))
		b = msgpackraw.AppendStr(b, "updates")
		b = msgpackraw.AppendArray(b, v.Updates == nil, len(v.Updates))
		for _, u := range v.Updates {
			b = msgpackraw.AppendBin(b, u)
		}
		if len(v.Kinds) > 0 {
			b = msgpackraw.AppendArray(msgpackraw.AppendStr(b, "kinds"), false, len(v.Kinds))
			for _, k := range v.Kinds {
				b = msgpackraw.AppendString(b, k)
			}
		}
		if len(v.MessageIDs) > 0 {
			b = msgpackraw.AppendArray(msgpackraw.AppendStr(b, "messageIds"), false, len(v.MessageIDs))
			for _, id := range v.MessageIDs {
				if id == nil {
					b = append(b, 0xc0)
				} else {
					b = msgpackraw.AppendString(b, *id)
				}
			}
		}
	case *AcpEphemeralSessionUpdateEvent:
		b = append(b, 0x83)
		b = msgpackraw.AppendString(msgpackraw.AppendStr(b, "sessionId"), v.SessionID)
		b = msgpackraw.AppendUint64(msgpackraw.AppendStr(b, "afterSequence"), v.AfterSequence)
		b = msgpackraw.AppendBin(msgpackraw.AppendStr(b, "update"), v.Update)
	case *EphemeralUpdates:
		b = append(b, 0x83)
		b = msgpackraw.AppendString(msgpackraw.AppendStr(b, "sessionId"), v.SessionID)
		b = msgpackraw.AppendUint64(msgpackraw.AppendStr(b, "afterSequence"), v.AfterSequence)
		b = msgpackraw.AppendArray(msgpackraw.AppendStr(b, "updates"), v.Updates == nil, len(v.Updates))
		for _, u := range v.Updates {
			b = msgpackraw.AppendBin(b, u)
		}
	default:
		return b, false
	}
	return b, true
}

func btoi(ok bool) int {
	if ok {
		return 1
	}
	return 0
}

// fastDecode decodes body into v when v is one of the records decoded by
// hand and body is laid out as fastBody writes it; false leaves v to the
// library.
func fastDecode(body []byte, v Variant) bool {
	switch v.(type) {
	case *AdapterUpdate, *AdapterUpdates, *AcpEphemeralSessionUpdateEvent, *EphemeralUpdates:
	default:
		return false
	}
	// The JSON read is sliced out of one copy of the body, not copied
	// one by one: a burst's updates cost one allocation, and the caller's
	// bytes are not held.
	r := msgpackraw.NewReader(bytes.Clone(body))
	switch v := v.(type) {
	case *AdapterUpdate:
		var u AdapterUpdate
		for n := r.MapLen(); n > 0 && r.Ok(); n-- {
			switch r.Str() {
			case "update":
				u.Update = r.Bin()
			case "kind":
				u.Kind = r.Str()
			case "messageId":
				u.MessageID = r.StrPtr()
			default:
				return false
			}
		}
		if !r.Done() {
			return false
		}
		*v = u
	case *AdapterUpdates:
		var u AdapterUpdates
		for n := r.MapLen(); n > 0 && r.Ok(); n-- {
			switch r.Str() {
			case "updates":
				u.Updates = bins(r)
			case "kinds":
				if m, isNil := r.ArrayLen(); !isNil {
					u.Kinds = make([]string, 0, min(m, r.Len()))
					for ; m > 0 && r.Ok(); m-- {
						u.Kinds = append(u.Kinds, r.Str())
					}
				}
			case "messageIds":
				if m, isNil := r.ArrayLen(); !isNil {
					u.MessageIDs = make([]*string, 0, min(m, r.Len()))
					for ; m > 0 && r.Ok(); m-- {
						u.MessageIDs = append(u.MessageIDs, r.StrPtr())
					}
				}
			default:
				return false
			}
		}
		if !r.Done() {
			return false
		}
		*v = u
	case *AcpEphemeralSessionUpdateEvent:
		var e AcpEphemeralSessionUpdateEvent
		for n := r.MapLen(); n > 0 && r.Ok(); n-- {
			switch r.Str() {
			case "sessionId":
				e.SessionID = r.Str()
			case "afterSequence":
				e.AfterSequence = r.Uint64()
			case "update":
				e.Update = r.Bin()
			default:
				return false
			}
		}
		if !r.Done() {
			return false
		}
		*v = e
	case *EphemeralUpdates:
		var e EphemeralUpdates
		for n := r.MapLen(); n > 0 && r.Ok(); n-- {
			switch r.Str() {
			case "sessionId":
				e.SessionID = r.Str()
			case "afterSequence":
				e.AfterSequence = r.Uint64()
			case "updates":
				e.Updates = bins(r)
			default:
				return false
			}
		}
		if !r.Done() {
			return false
		}
		*v = e
	default:
		return false
	}
	return true
}

// bins reads an array of bytes, or a nil.
func bins(r *msgpackraw.Reader) []JSON {
	m, isNil := r.ArrayLen()
	if isNil {
		return nil
	}
	out := make([]JSON, 0, min(m, r.Len()))
	for ; m > 0 && r.Ok(); m-- {
		out = append(out, r.Bin())
	}
	return out
}
