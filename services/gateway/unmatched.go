package gateway

import (
	"net/http"

	"skein.dev/pkg/events"
)

// unmatched answers the requests that match no route with the JSON error
// body every route answers with, and passes the rest to mux. The mux would
// answer them itself, in plain text: 404 for a path no route has, 405 for a
// path whose routes take other methods. A client then branches on the code
// (not_found, method_not_allowed) as it does for every other failure, and
// finds the request ID in the body as in the log.
//
// A request matches no route exactly when the mux gives it no pattern (a
// redirect, to a cleaned path or one with a trailing slash, has one). The
// mux's own handler for it is run against a probe, which keeps what it
// would have answered (the status, and for 405 the Allow header it built
// from the routes), and nothing of that is sent.
func (g *Gateway) unmatched(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		probe := &probeWriter{header: http.Header{}}
		h.ServeHTTP(probe, r)
		path := events.Truncate(r.URL.Path, 200)
		switch probe.status {
		case http.StatusNotFound:
			g.writeError(w, r, events.Errorf(events.CodeNotFound, "no route has the path %q", path))
		case http.StatusMethodNotAllowed:
			allow := probe.header.Get("Allow")
			w.Header().Set("Allow", allow)
			g.writeError(w, r, events.Errorf(events.CodeMethodNotAllowed, "%s is not allowed on %q; allowed: %s",
				events.Truncate(r.Method, 20), path, allow))
		default:
			// Nothing else has no pattern today; should the mux grow one,
			// it answers as it would.
			mux.ServeHTTP(w, r)
		}
	})
}

// probeWriter is a ResponseWriter that keeps the status and headers written
// to it and drops the body.
type probeWriter struct {
	header http.Header
	status int
}

func (p *probeWriter) Header() http.Header { return p.header }

func (p *probeWriter) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}

func (p *probeWriter) Write(b []byte) (int, error) {
	if p.status == 0 {
		p.status = http.StatusOK
	}
	return len(b), nil
}
