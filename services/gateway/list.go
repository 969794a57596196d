package gateway

import (
	"encoding/json"
	"net/http"
	"net/url"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// handleListSessions serves GET /v1/sessions?limit=&cursor=: a page of the
// caller's sessions, newest update first, from the history service's
// index. No adapter starts.
func (g *Gateway) handleListSessions(w http.ResponseWriter, r *http.Request) error {
	ns, err := g.namespace(r)
	if err != nil {
		return err
	}
	req, err := parseListQuery(r.URL.Query())
	if err != nil {
		return err
	}
	ctx, cancel := g.callContext(r)
	defer cancel()
	resp, err := rpc.Call[events.AcpListDurableSessionsResponse](ctx, g.nc, events.APISubject(ns, events.OpListSessions), req, nil)
	if err != nil {
		return err
	}
	b, err := renderSessionList(resp)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// parseListQuery reads listSessions' query: limit and cursor, each at most
// once, nothing else.
func parseListQuery(q url.Values) (*events.AcpListDurableSessionsRequest, error) {
	if err := onlyKeys(q, "cursor", "limit"); err != nil {
		return nil, err
	}
	req := &events.AcpListDurableSessionsRequest{}
	cursor, ok, err := single(q, "cursor")
	if err != nil {
		return nil, err
	}
	if ok {
		req.Cursor = &cursor
	}
	if req.Limit, err = parseLimit(q, events.MaxListLimit); err != nil {
		return nil, err
	}
	return req, nil
}

// renderSessionList returns {sessions, nextCursor}; nextCursor is absent on
// the last page.
func renderSessionList(resp *events.AcpListDurableSessionsResponse) ([]byte, error) {
	sessions := make([]json.RawMessage, len(resp.Sessions))
	for i := range resp.Sessions {
		b, err := renderSession(&resp.Sessions[i])
		if err != nil {
			return nil, err
		}
		sessions[i] = b
	}
	b, err := json.Marshal(struct {
		Sessions   []json.RawMessage `json:"sessions"`
		NextCursor *string           `json:"nextCursor,omitempty"`
	}{sessions, resp.NextCursor})
	if err != nil {
		return nil, events.Errorf(events.CodeInternal, "render session list: %v", err)
	}
	return b, nil
}
