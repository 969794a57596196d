package adapterrunner

import (
	"encoding/json"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/acpwire"
	"skein.dev/pkg/events"
)

func (p *process) header(record string) nats.Header {
	return nats.Header{
		events.HeaderRecord:    []string{record},
		events.HeaderProcessID: []string{p.id},
	}
}

// publish appends v to the session's ACP_IO subject. It does not wait for
// the acknowledgement, so the reader goroutine keeps reading; messages from
// one connection are stored in the order they were sent.
func (p *process) publish(v events.Variant, hdr nats.Header) {
	data, err := events.Marshal(v)
	if err != nil {
		p.lg.Error("encode runner record", events.LogKeyRecord, v.VariantName(), events.LogKeyErr, err)
		return
	}
	if hdr == nil {
		hdr = p.header(v.VariantName())
	}
	fut, err := p.js.PublishMsgAsync(&nats.Msg{Subject: p.subject, Header: hdr, Data: data})
	if err != nil {
		p.m.ioPublishErrors.Inc()
		p.lg.Error("publish runner record", events.LogKeyRecord, v.VariantName(), events.LogKeyErr, err)
		return
	}
	p.m.ioRecords.Inc()
	go func() {
		select {
		case <-fut.Ok():
		case err := <-fut.Err():
			p.m.ioPublishErrors.Inc()
			p.lg.Error("runner record not stored", events.LogKeyRecord, v.VariantName(), events.LogKeyErr, err)
		}
	}()
}

func (p *process) onNotification(m *acpwire.Message) {
	if p.replaying.Load() && m.Method == acpwire.MethodSessionUpdate {
		return // the log is the only history: a load's replay is not output
	}
	p.publish(&events.AcpSessionEvent{SessionID: string(p.sid), Notification: events.JSON(m.Raw)}, nil)
}

func (p *process) onRequest(m *acpwire.Message) {
	p.publish(&events.AcpHostRequestCallback{SessionID: string(p.sid), Request: events.JSON(m.Raw)}, nil)
}

// forward writes one request (callID set) or notification to the adapter.
// The response is published to ACP_IO with the same call ID, from the reader
// goroutine, after every line the adapter wrote before it.
func (p *process) forward(callID, method string, params events.JSON) error {
	var err error
	if callID == "" {
		err = p.conn.Notify(method, json.RawMessage(params))
	} else {
		_, err = p.conn.CallAsync(method, json.RawMessage(params), func(m *acpwire.Message) {
			if m.Raw == nil {
				// The adapter ended without answering: its exit, reported
				// next, is the outcome.
				return
			}
			hdr := p.header("AcpSessionRpcResponse")
			hdr.Set(events.HeaderCallID, callID)
			p.publish(&events.AcpSessionRpcResponse{SessionID: string(p.sid), Response: events.JSON(m.Raw)}, hdr)
		})
	}
	if err != nil {
		return events.Errorf(events.CodeAdapterExited, "write to agent %s: %v", p.agent.ID, err)
	}
	if callID != "" {
		p.mu.Lock()
		p.written[callID] = true
		p.order = append(p.order, callID)
		if len(p.order) > maxWritten {
			delete(p.written, p.order[0])
			p.order = p.order[1:]
		}
		p.mu.Unlock()
	}
	return nil
}

// maxWritten bounds how many written call IDs a process remembers.
const maxWritten = 1024

// status reports whether the process runs and whether call callID was
// written to it.
func (p *process) status(callID string) *events.AdapterStatus {
	st := &events.AdapterStatus{}
	select {
	case <-p.exited:
		return st
	case <-p.conn.Done():
		return st
	default:
	}
	st.Alive = true
	p.mu.Lock()
	st.CallWritten = callID != "" && p.written[callID]
	p.mu.Unlock()
	return st
}

// reply writes a complete JSON-RPC response to an agent-to-client request.
func (p *process) reply(response events.JSON) error {
	if err := p.conn.WriteRaw(response); err != nil {
		return events.Errorf(events.CodeAdapterExited, "write to agent %s: %v", p.agent.ID, err)
	}
	return nil
}
