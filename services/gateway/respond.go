package gateway

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/services/gateway/internal/errmap"
)

// HeaderRequestID names the response header that carries the request ID.
// The same ID is in every error body and in the gateway's log lines about
// the request, so a masked error can be found in the log.
const HeaderRequestID = "X-Request-Id"

// HeaderTurnID names the response header of a prompt that was accepted:
// its turn's ID, whatever the prompt answers, so that a client following
// the session's events knows which turn_finished ends it.
const HeaderTurnID = "X-Skein-Turn-Id"

// Log keys the gateway adds to those of events.LogKey*.
const (
	logKeyRequestID = "request_id"
	logKeyRoute     = "route"
	logKeyStatus    = "status"
	logKeyAddr      = "addr"
	logKeyCause     = "cause"
)

// statusClientClosed is recorded (never sent) when the client went away
// before the response was written, as nginx does.
const statusClientClosed = 499

type requestIDKey struct{}

// requestID returns the ID instrument gave r.
func requestID(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey{}).(string)
	return id
}

// recorder remembers the status a handler wrote.
type recorder struct {
	http.ResponseWriter
	status int
}

func (rw *recorder) WriteHeader(code int) {
	if rw.status == 0 {
		rw.status = code
	}
	rw.ResponseWriter.WriteHeader(code)
}

func (rw *recorder) Write(b []byte) (int, error) {
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	return rw.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and SetWriteDeadline.
func (rw *recorder) Unwrap() http.ResponseWriter { return rw.ResponseWriter }

// instrument gives every request an ID and counts it by route and status.
func (g *Gateway) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := rand.Text()
		w.Header().Set(HeaderRequestID, id)
		r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
		rec := &recorder{ResponseWriter: w}
		start := time.Now()
		next.ServeHTTP(rec, r)
		status := rec.status
		if status == 0 {
			status = http.StatusOK
			if r.Context().Err() != nil {
				status = statusClientClosed
			}
		}
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		g.metrics.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
		g.metrics.requestSeconds.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

// writeJSON writes a complete JSON response.
func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // a failed write means the client left; nothing to do
}

// errorBody is the JSON of every error response and of an SSE error event.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code      events.Code `json:"code"`
	Message   string      `json:"message"`
	RequestID string      `json:"requestId,omitempty"`
}

// publicError maps err for a client and logs it: in full when it is
// masked, at debug level when it is the client's own doing. It returns the
// HTTP status and the body.
func (g *Gateway) publicError(r *http.Request, err error) (int, errorBody) {
	g.noteStorageFull(err)
	p := errmap.Map(err)
	id := requestID(r)
	attrs := []any{logKeyRequestID, id, logKeyRoute, r.Pattern, logKeyStatus, p.Status, events.LogKeyErr, err}
	switch {
	case p.Masked:
		g.lg.Error("request failed", attrs...)
	case p.Status >= 500:
		g.lg.Warn("request failed", append(attrs, events.LogKeyCode, p.Code)...)
	default:
		g.lg.Debug("request rejected", append(attrs, events.LogKeyCode, p.Code)...)
	}
	return p.Status, errorBody{Error: errorDetail{Code: p.Code, Message: p.Message, RequestID: id}}
}

// writeError answers r with err. A client that already went away gets
// nothing: its context error is not a failure of the gateway.
func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
		g.lg.Debug("client went away", logKeyRequestID, requestID(r), logKeyRoute, r.Pattern)
		return
	}
	status, body := g.publicError(r, err)
	b, merr := json.Marshal(body)
	if merr != nil {
		// Cannot happen for these field types; keep the status anyway.
		g.lg.Error("encode error body", events.LogKeyErr, merr)
		b = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	writeJSON(w, status, b)
}
