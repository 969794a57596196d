package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/client/turnwait"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
	"skein.dev/pkg/events/rpc"
)

// target resolves the namespace and the session a request addresses. An
// invalid session ID is invalid_session_id and never becomes a subject.
func (g *Gateway) target(r *http.Request) (events.Namespace, events.SessionID, error) {
	ns, err := g.namespace(r)
	if err != nil {
		return "", "", err
	}
	sid, err := events.ParseSessionID(r.PathValue("id"))
	if err != nil {
		return "", "", err
	}
	return ns, sid, nil
}

// callContext bounds a request-API call other than prompt.
func (g *Gateway) callContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), g.cfg.RequestTimeout)
}

// handleOpen serves PUT /v1/sessions/{id}: open the session, idempotently.
func (g *Gateway) handleOpen(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpOpenSession, g.cfg.MaxBodyBytes,
		func(body []byte, sid events.SessionID) (events.Variant, error) { return decodeOpen(body, sid) },
		func(*events.AcpOpenSessionResponse) error { writeJSON(w, http.StatusOK, []byte(`{}`)); return nil })
}

// handleGetSession serves GET /v1/sessions/{id}: the durable metadata.
func (g *Gateway) handleGetSession(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpGetSession, 0,
		func(_ []byte, sid events.SessionID) (events.Variant, error) {
			return &events.AcpGetDurableSessionRequest{SessionID: new(string(sid))}, nil
		},
		func(resp *events.AcpGetDurableSessionResponse) error { return writeSession(w, &resp.Session) })
}

// handlePrompt serves POST /v1/sessions/{id}/prompt. It blocks through the
// turn, for as long as the client waits: there is no deadline of its own.
//
// Waiting is a read of the log, never a held request (DESIGN invariant 7):
// the session service answers the prompt as soon as the turn is accepted
// (events.PromptAccepted, within RequestTimeout), and the gateway then
// reads the session's log until the turn's TurnFinished
// (turnwait.Await). So the answer arrives whichever session service
// replica ends the turn, even when the one that accepted it died. A client
// that goes away does not cancel the turn (the session service owns it);
// it only stops waiting. Sending the same prompt again with the same
// idempotency key waits for the same turn, or answers its outcome at once
// when it already ended.
func (g *Gateway) handlePrompt(w http.ResponseWriter, r *http.Request) error {
	ns, sid, err := g.target(r)
	if err != nil {
		return err
	}
	body, err := readBody(w, r, g.cfg.MaxPromptBodyBytes)
	if err != nil {
		return err
	}
	req, err := decodePrompt(body, sid, g.cfg.promptLimits())
	if err != nil {
		return err
	}
	ctx, cancel := g.callContext(r)
	acc, err := turnwait.AcceptWith(ctx, g.nc, ns, req, principalHeader(r)) // a keyed prompt is asked again when no answer comes
	cancel()
	if err != nil {
		return err
	}
	if q := acc.Queued; q != nil {
		// Queued behind the running turn: answered now, never held
		// across the turns before it.
		b, err := json.Marshal(map[string]queuedRefJSON{"queued": {ID: q.ID, Position: q.Position}})
		if err != nil {
			return events.Errorf(events.CodeInternal, "render queued prompt: %v", err)
		}
		writeJSON(w, http.StatusAccepted, b)
		return nil
	}
	// The accepted turn, on the answer whatever it is: a client that
	// follows the session's events knows its turn_finished by it.
	w.Header().Set(HeaderTurnID, acc.TurnID)
	finished, err := turnwait.Await(r.Context(), g.js, ns, sid, acc)
	if err != nil {
		return err
	}
	resp, err := turnwait.Result(r.Context(), g.js, ns, sid, finished)
	if err != nil {
		return err
	}
	b, err := renderPrompt(resp)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// controlBodyLimit bounds the body of a cancel, an unload, a delete, a
// permission answer or a config value.
func (g *Gateway) controlBodyLimit() int64 { return min(g.cfg.MaxBodyBytes, maxControlBody) }

// handleCancel serves POST /v1/sessions/{id}/cancel: cancel the running
// turn, if any. The answer is the status the session service decided:
// cancelled, no_active_prompt, or the outcome of the turn that ended while
// the cancel waited for it.
func (g *Gateway) handleCancel(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpCancelPrompt, g.controlBodyLimit(),
		emptyBody(func(sid *string) validator { return &events.AcpCancelPromptRequest{SessionID: sid} }),
		func(resp *events.AcpCancelPromptResponse) error { return writeStatus(w, resp.Status, nil, nil) })
}

// handleUnload serves POST /v1/sessions/{id}/unload: cancel the running
// turn, if any, as a cancel does, and stop the session's adapter. The
// session's metadata and history stay, and its next prompt restores it.
// Unloading a session that is already unloaded succeeds.
func (g *Gateway) handleUnload(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpUnloadSession, g.controlBodyLimit(),
		emptyBody(func(sid *string) validator { return &events.AcpUnloadSessionRequest{SessionID: sid} }),
		func(*events.AcpUnloadSessionResponse) error { writeJSON(w, http.StatusOK, []byte(`{}`)); return nil })
}

// handleDelete serves DELETE /v1/sessions/{id}: tear down the session's
// runtime (its running turn is cancelled, its pending permission requests
// end with session_deleted, its adapter stops), then remove its metadata
// and history. Deleting a missing or already deleted session succeeds;
// reopening the ID starts a new, empty session.
func (g *Gateway) handleDelete(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpDeleteSession, g.controlBodyLimit(),
		emptyBody(func(sid *string) validator { return &events.AcpDeleteSessionRequest{SessionID: sid} }),
		func(*events.AcpDeleteSessionResponse) error { writeJSON(w, http.StatusOK, []byte(`{}`)); return nil })
}

// validator is a request of the API that checks itself.
type validator interface {
	events.Variant
	Validate() (events.SessionID, error)
}

// sessionOp serves a route that is one op on the URL's session: it reads
// the body, up to limit bytes (0: the route takes none, and none is read),
// decodes it with the session's ID into op's request, sends that, and
// writes the reply, which must be a *T (anything else is invalid_payload,
// masked), with render.
func sessionOp[T any, PT interface {
	*T
	events.Variant
}](g *Gateway, w http.ResponseWriter, r *http.Request, op events.Op, limit int64,
	decode func(body []byte, sid events.SessionID) (events.Variant, error), render func(PT) error) error {
	ns, sid, err := g.target(r)
	if err != nil {
		return err
	}
	var body []byte
	if limit > 0 {
		if body, err = readBody(w, r, limit); err != nil {
			return err
		}
	}
	req, err := decode(body, sid)
	if err != nil {
		return err
	}
	ctx, cancel := g.callContext(r)
	defer cancel()
	var resp PT
	if resendOps[op] {
		resp, err = rpc.CallAgain[T, PT](ctx, g.nc, events.APISubject(ns, op), req, principalHeader(r), resendAttempt)
	} else {
		resp, err = rpc.Call[T, PT](ctx, g.nc, events.APISubject(ns, op), req, principalHeader(r))
	}
	if err != nil {
		return err
	}
	return render(resp)
}

// resendOps are the operations that, done twice, do what doing them once
// does: when no answer comes within resendAttempt (the request or its
// reply was lost with a NATS node, or the replica that held it died), the
// gateway sends them again rather than wait out its request timeout. A
// cancel is not one: sent again after its turn ended, it could cancel the
// next.
var resendOps = map[events.Op]bool{
	events.OpOpenSession: true, events.OpGetSession: true, events.OpDeleteSession: true,
	events.OpUnloadSession: true, events.OpRenameSession: true, events.OpGetSessionConfig: true,
	events.OpGetSessionCapabilities: true, events.OpGetSessionAgentInfo: true,
	events.OpGetSessionCommands: true, events.OpFileList: true,
}

// resendAttempt bounds one attempt of a resendOps operation: far longer
// than any takes on a healthy cluster, short enough that a lost request
// costs its caller little. An attempt cut short while the first still
// runs is harmless: the next one finds its work done, or joins it.
const resendAttempt = 10 * time.Second

// principalHeader names r's principal to the session service, which
// counts the adapters it attaches against that principal's quota; nil
// when there is none (authentication off).
func principalHeader(r *http.Request) nats.Header {
	if p := principalOf(r); p != "" {
		return nats.Header{events.HeaderPrincipal: []string{p}}
	}
	return nil
}

// pathSession is the session ID of r's path, for an error's message once
// sessionOp has checked it.
func pathSession(r *http.Request) events.SessionID { return events.SessionID(r.PathValue("id")) }

// emptyBody decodes the body of a control route, which is empty or {},
// into the request build makes for the session, checked.
func emptyBody(build func(sid *string) validator) func([]byte, events.SessionID) (events.Variant, error) {
	return func(body []byte, sid events.SessionID) (events.Variant, error) {
		if err := decodeEmpty(body); err != nil {
			return nil, err
		}
		req := build(new(string(sid)))
		if _, err := req.Validate(); err != nil {
			return nil, err
		}
		return req, nil
	}
}

// handleRespond serves POST /v1/sessions/{id}/permissions/{requestId}:
// answer a pending permission request. A request that is no longer pending
// (answered by someone else, ended by a cancel, an exit or a failure, or
// never known) is a 200 with status not_pending and the reason: a late
// answer is a normal race, not an error. An option that is not on offer is
// invalid_permission_option and consumes nothing.
func (g *Gateway) handleRespond(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpRespondPermission, g.controlBodyLimit(),
		func(body []byte, sid events.SessionID) (events.Variant, error) {
			return decodeRespond(body, sid, r.PathValue("requestId"))
		},
		func(resp *events.AcpRespondPermissionResponse) error {
			return writeStatus(w, resp.Status, resp.Reason, resp.ResolvedBy)
		})
}

// statusJSON is the answer of cancel and respond.
type statusJSON struct {
	Status     string  `json:"status"`
	Reason     *string `json:"reason,omitempty"`
	ResolvedBy *string `json:"resolvedBy,omitempty"` // a late answer's: who answered first
}

// writeStatus answers 200 {"status", "reason"?}, or writes nothing and
// returns the error.
func writeStatus(w http.ResponseWriter, status string, reason, resolvedBy *string) error {
	b, err := json.Marshal(statusJSON{Status: status, Reason: reason, ResolvedBy: resolvedBy})
	if err != nil {
		return events.Errorf(events.CodeInternal, "render status %q: %v", status, err)
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// handleHistory serves GET /v1/sessions/{id}/history: one page.
func (g *Gateway) handleHistory(w http.ResponseWriter, r *http.Request) error {
	ns, sid, err := g.target(r)
	if err != nil {
		return err
	}
	req, err := parseHistoryQuery(r.URL.Query())
	if err != nil {
		return err
	}
	req.SessionID = new(string(sid))
	ctx, cancel := g.callContext(r)
	defer cancel()
	page, err := g.readHistory(ctx, ns, req)
	if err != nil {
		return err
	}
	b, err := renderHistory(page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// readHistory asks the history service for one page. A page is bounded
// below max_payload, but one event larger than a message carries is a
// page of its own, which comes in chunks.
func (g *Gateway) readHistory(ctx context.Context, ns events.Namespace, req *events.AcpReadHistoryRequest) (*events.AcpHistoryPageResponse, error) {
	return rpc.CallChunked[events.AcpHistoryPageResponse](ctx, g.nc, events.APISubject(ns, events.OpReadHistory), req, nil)
}

// handleGetConfig serves GET /v1/sessions/{id}/config: the session's
// config options as the agent last reported them, with their revision.
// The history service answers from what it stored; no adapter starts.
func (g *Gateway) handleGetConfig(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpGetSessionConfig, 0,
		func(_ []byte, sid events.SessionID) (events.Variant, error) {
			return &events.AcpGetSessionConfigRequest{SessionID: new(string(sid))}, nil
		},
		func(resp *events.AcpSessionConfigResponse) error { return writeConfig(w, pathSession(r), resp) })
}

// handleSetConfig serves PUT /v1/sessions/{id}/config/{configId}: set one
// config option. The session service may restore the adapter first; the
// agent validates the value (a rejected one is adapter_error), and its
// answer, the whole option collection with a new revision, is the reply.
func (g *Gateway) handleSetConfig(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpSetSessionConfigOption, g.controlBodyLimit(),
		func(body []byte, sid events.SessionID) (events.Variant, error) {
			return decodeSetConfig(body, sid, r.PathValue("configId"))
		},
		func(resp *events.AcpSessionConfigResponse) error { return writeConfig(w, pathSession(r), resp) })
}

// configJSON is AcpSessionConfigResponse in JSON, the options embedded.
type configJSON struct {
	Revision uint64      `json:"revision"`
	Options  events.JSON `json:"options"`
}

// writeConfig answers 200 {"revision", "options"}. Options that are not a
// JSON array are an internal error (a service stored garbage), never a
// broken response; none at all are []. On an error it writes nothing.
func writeConfig(w http.ResponseWriter, sid events.SessionID, resp *events.AcpSessionConfigResponse) error {
	options := resp.Options
	if len(options) == 0 {
		options = events.JSON(`[]`)
	}
	var list []json.RawMessage
	if err := json.Unmarshal(options, &list); err != nil {
		return events.Errorf(events.CodeInternal, "render config of %s: options are not a JSON array: %v", sid, err)
	}
	b, err := json.Marshal(configJSON{Revision: resp.Revision, Options: options})
	if err != nil {
		return events.Errorf(events.CodeInternal, "render config of %s: %v", sid, err)
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// handleCapabilities serves GET /v1/sessions/{id}/capabilities: the
// agent's capabilities as it last reported them, or null. No adapter
// starts.
func (g *Gateway) handleCapabilities(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpGetSessionCapabilities, 0,
		func(_ []byte, sid events.SessionID) (events.Variant, error) {
			return &events.AcpGetSessionCapabilitiesRequest{SessionID: new(string(sid))}, nil
		},
		func(resp *events.AcpSessionCapabilitiesResponse) error {
			return writeRaw(w, "capabilities", pathSession(r), struct {
				Capabilities events.JSON `json:"capabilities"`
			}{resp.Capabilities})
		})
}

// handleAgentInfo serves GET /v1/sessions/{id}/agent-info: the agent's
// implementation info as it last reported it, or null. No adapter starts.
func (g *Gateway) handleAgentInfo(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpGetSessionAgentInfo, 0,
		func(_ []byte, sid events.SessionID) (events.Variant, error) {
			return &events.AcpGetSessionAgentInfoRequest{SessionID: new(string(sid))}, nil
		},
		func(resp *events.AcpSessionAgentInfoResponse) error {
			return writeRaw(w, "agent info", pathSession(r), struct {
				AgentInfo events.JSON `json:"agentInfo"`
			}{resp.AgentInfo})
		})
}

// writeRaw answers 200 with v, an object of one events.JSON field (null
// when empty). A field that is not valid JSON is an internal error, and
// nothing is written.
func writeRaw(w http.ResponseWriter, what string, sid events.SessionID, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return events.Errorf(events.CodeInternal, "render %s of %s: %v", what, sid, err)
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// handleListAgents serves GET /v1/agents: every agent a live adapter
// runner knows, and each live runner with what it offers, as the history
// service reports them (sorted by ID).
func (g *Gateway) handleListAgents(w http.ResponseWriter, r *http.Request) error {
	ns, err := g.namespace(r)
	if err != nil {
		return err
	}
	ctx, cancel := g.callContext(r)
	defer cancel()
	resp, err := rpc.Call[events.AcpListAgentsResponse](ctx, g.nc, events.APISubject(ns, events.OpListAgents), &events.AcpListAgentsRequest{}, nil)
	if err != nil {
		return err
	}
	b, err := renderAgents(resp)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// agentJSON is AcpAgentEntry in JSON.
type agentJSON struct {
	ID                string `json:"id"`
	Installed         bool   `json:"installed"`
	AdapterEntrypoint string `json:"adapterEntrypoint"`
}

// runnerJSON is RunnerEntry in JSON (a Skein addition).
type runnerJSON struct {
	ID         string            `json:"id"`
	Agents     []agentJSON       `json:"agents"`
	Labels     map[string]string `json:"labels"`
	PlacedOnly bool              `json:"placedOnly"`
	Load       uint32            `json:"load"`
	Capacity   uint32            `json:"capacity"`
}

// agentsJSON is AcpListAgentsResponse in JSON.
type agentsJSON struct {
	Agents  []agentJSON  `json:"agents"`
	Runners []runnerJSON `json:"runners"`
}

// renderAgents returns {"agents":[...],"runners":[...]}, in the service's
// order. Each list is [] when empty, never null, and so are a runner's
// agents and labels.
func renderAgents(resp *events.AcpListAgentsResponse) ([]byte, error) {
	agents := func(in []events.AcpAgentEntry) []agentJSON {
		out := make([]agentJSON, 0, len(in))
		for _, a := range in {
			out = append(out, agentJSON{ID: a.ID, Installed: a.Installed, AdapterEntrypoint: a.AdapterEntrypoint})
		}
		return out
	}
	out := agentsJSON{Agents: agents(resp.Agents), Runners: make([]runnerJSON, 0, len(resp.Runners))}
	for _, r := range resp.Runners {
		labels := r.Labels
		if labels == nil {
			labels = map[string]string{}
		}
		out.Runners = append(out.Runners, runnerJSON{ID: r.ID, Agents: agents(r.Agents), Labels: labels,
			PlacedOnly: r.PlacedOnly, Load: r.Load, Capacity: r.Capacity})
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, events.Errorf(events.CodeInternal, "render agents: %v", err)
	}
	return b, nil
}

// sessionJSON is AcpDurableSessionInfo in JSON, JsonUtf8 fields embedded.
type sessionJSON struct {
	SessionID             string       `json:"sessionId"`
	Agent                 string       `json:"agent"`
	Cwd                   string       `json:"cwd"`
	AdditionalDirectories events.JSON  `json:"additionalDirectories"`
	State                 events.JSON  `json:"state"`
	LatestSequence        uint64       `json:"latestSequence"`
	Title                 *string      `json:"title,omitempty"`
	Metadata              events.JSON  `json:"metadata,omitempty"`
	CreatedAt             string       `json:"createdAt"`
	UpdatedAt             string       `json:"updatedAt"`
	Usage                 *usageJSON   `json:"usage,omitempty"`          // offers.go
	LastTurnTiming        *timingJSON  `json:"lastTurnTiming,omitempty"` // offers.go
	Runner                string       `json:"runner,omitempty"`         // the runner a placed session is pinned to
	CreatedBy             string       `json:"createdBy,omitempty"`      // the principal that opened it
	Queued                []queuedJSON `json:"queued,omitempty"`         // the prompt queue (queue.go)
	QueueHeld             bool         `json:"queueHeld,omitempty"`
	Budget                *budgetJSON  `json:"budget,omitempty"` // its spending cap and spend
}

// budgetJSON is events.BudgetInfo in JSON.
type budgetJSON struct {
	MaxCost *moneyJSON `json:"maxCost"`
	Spent   moneyJSON  `json:"spent"`
}

type moneyJSON struct {
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
}

// queuedRefJSON is a queue entry's place: a queued prompt's answer.
type queuedRefJSON struct {
	ID       string `json:"id"`
	Position uint32 `json:"position"`
}

// queuedJSON is a QueuedPrompt in JSON.
type queuedJSON struct {
	ID        string      `json:"id"`
	Position  uint32      `json:"position"`
	Content   events.JSON `json:"content"`
	Principal string      `json:"principal,omitempty"`
	QueuedAt  string      `json:"queuedAt"`
}

// queueJSON renders a session's queue, [] when nothing waits.
func queueJSON(q []events.QueuedPrompt) []queuedJSON {
	out := make([]queuedJSON, 0, len(q))
	for _, p := range q {
		out = append(out, queuedJSON{ID: p.ID, Position: p.Position, Content: p.Content, Principal: p.Principal, QueuedAt: p.QueuedAt})
	}
	return out
}

// renderSession returns the JSON of a session. A JsonUtf8 field that is not
// valid JSON is an internal error (the history service stored garbage),
// never a broken response.
// writeSession answers 200 with the session's JSON.
func writeSession(w http.ResponseWriter, s *events.AcpDurableSessionInfo) error {
	b, err := renderSession(s)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

func renderSession(s *events.AcpDurableSessionInfo) ([]byte, error) {
	usage, timing := offersJSON(s)
	out := sessionJSON{
		SessionID:             s.SessionID,
		Agent:                 s.Agent,
		Cwd:                   s.Cwd,
		AdditionalDirectories: s.AdditionalDirectories,
		State:                 s.State,
		LatestSequence:        s.LatestSequence,
		Title:                 s.Title,
		Metadata:              s.Metadata,
		CreatedAt:             s.CreatedAt,
		UpdatedAt:             s.UpdatedAt,
		Usage:                 usage,
		LastTurnTiming:        timing,
		Runner:                s.Runner,
		CreatedBy:             s.CreatedBy,
		QueueHeld:             s.QueueHeld,
		Budget:                renderBudget(s.Budget),
	}
	if len(s.Queue) > 0 {
		out.Queued = queueJSON(s.Queue)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, events.Errorf(events.CodeInternal, "render session %s: %v", s.SessionID, err)
	}
	return b, nil
}

// renderBudget returns b in JSON, nil for none.
func renderBudget(b *events.BudgetInfo) *budgetJSON {
	if b == nil {
		return nil
	}
	out := &budgetJSON{Spent: moneyJSON(b.Spent)}
	if b.MaxCost != nil {
		out.MaxCost = new(moneyJSON(*b.MaxCost))
	}
	return out
}

// promptJSON is AcpPromptResponse in JSON.
type promptJSON struct {
	SessionID  string      `json:"sessionId"`
	Message    events.JSON `json:"message,omitempty"`
	StopReason string      `json:"stopReason"`
}

func renderPrompt(p *events.AcpPromptResponse) ([]byte, error) {
	b, err := json.Marshal(promptJSON{SessionID: p.SessionID, Message: p.Message, StopReason: p.StopReason})
	if err != nil {
		return nil, events.Errorf(events.CodeInternal, "render prompt response of %s: %v", p.SessionID, err)
	}
	return b, nil
}

// publicSize estimates the length of an entry's public JSON: its native
// JSON plus the envelope.
func publicSize(e *events.AcpDurableHistoryEntry) int {
	n := 128 + len(e.SessionID) + len(e.Timestamp)
	switch v := e.Event.V.(type) {
	case *events.AcpDurableSessionUpdate:
		n += len(v.Update)
	case *events.AcpDurablePermissionRequest:
		n += len(v.Request) + len(v.RequestID)
	case *events.AcpDurablePermissionResponse:
		n += len(v.Response) + len(v.RequestID) + len(v.Status)
	case *events.InputRequest:
		n += len(v.Request) + len(v.RequestID)
	case *events.InputResponse:
		n += len(v.Response) + len(v.RequestID) + len(v.Status)
	case *events.SessionStateChange:
		n += 128 + len(v.TurnID)
		if v.Error != nil {
			n += len(v.Error.Message)
		}
	}
	return n
}

// renderHistory returns {"events":[...],"hasMoreBefore":b,"hasMoreAfter":b},
// each event in its public JSON form.
func renderHistory(page *events.AcpHistoryPageResponse) ([]byte, error) {
	size := 64
	for i := range page.Events {
		size += publicSize(&page.Events[i])
	}
	b := make([]byte, 0, size)
	b = append(b, `{"events":[`...)
	for i := range page.Events {
		ev, err := eventjson.Durable(&page.Events[i])
		if err != nil {
			return nil, events.Errorf(events.CodeInternal, "render history event %d: %v", page.Events[i].Sequence, err)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, ev...)
	}
	b = append(b, `],"hasMoreBefore":`...)
	b = strconv.AppendBool(b, page.HasMoreBefore)
	b = append(b, `,"hasMoreAfter":`...)
	b = strconv.AppendBool(b, page.HasMoreAfter)
	return append(b, '}'), nil
}
