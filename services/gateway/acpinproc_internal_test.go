package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"skein.dev/internal/lifecycle"
)

// inProcessClient serves every request with h.
func inProcessClient(t *testing.T, h http.Handler, work *lifecycle.Group) *http.Client {
	lg := slog.New(slog.NewTextHandler(t.Output(), nil))
	return &http.Client{Transport: &inProcess{h: h, work: work, lg: lg, remoteAddr: "192.0.2.1:4711"}}
}

type testCtxKey struct{}

// testBaseURL is where the tests' requests go: nowhere but the handler.
const testBaseURL = "http://gateway.skein.invalid"

// TestInProcessStreams: the response comes once its status is written,
// and its body as the handler writes it: the client reads the first event
// before the handler writes the second. The request reaches the handler
// as a server's would, without the caller's context values, and its
// context ends when the caller's does.
func TestInProcessStreams(t *testing.T) {
	next := make(chan struct{})
	ended := make(chan error, 1)
	var got *http.Request
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "data: 1\n\n")
		<-next
		_, _ = io.WriteString(w, "data: 2\n\n")
		<-r.Context().Done()
		ended <- r.Context().Err()
	})
	var work lifecycle.Group
	c := inProcessClient(t, h, &work)
	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), testCtxKey{}, "caller"))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, testBaseURL+"/v1/sessions/s1/events?after=3", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("response %d %q, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	body := bufio.NewReader(resp.Body)
	line := func() string {
		t.Helper()
		s, err := body.ReadString('\n')
		if err != nil {
			t.Fatalf("read the body: %v", err)
		}
		return strings.TrimSpace(s)
	}
	if l := line(); l != "data: 1" {
		t.Fatalf("first line %q, want data: 1", l)
	}
	line()
	close(next)
	if l := line(); l != "data: 2" {
		t.Fatalf("second event %q, want data: 2", l)
	}
	if got.RemoteAddr != "192.0.2.1:4711" || got.RequestURI != "/v1/sessions/s1/events?after=3" || got.URL.Host != "" || got.Host != "gateway.skein.invalid" {
		t.Errorf("the handler got RemoteAddr %q, RequestURI %q, URL.Host %q, Host %q", got.RemoteAddr, got.RequestURI, got.URL.Host, got.Host)
	}
	if v := got.Context().Value(testCtxKey{}); v != nil {
		t.Errorf("the handler's context carries the caller's value %v", v)
	}
	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Errorf("the handler's context ended with %v, want canceled", err)
	}
	work.Close() // returns: the handler's goroutine ended
	if _, err := c.Get(testBaseURL + "/"); !errors.Is(err, errInProcessStopped) {
		t.Errorf("a request after Close = %v, want %v", err, errInProcessStopped)
	}
}

// TestInProcessBodyClose: closing the body ends the handler, even one
// blocked in a write its reader never takes.
func TestInProcessBodyClose(t *testing.T) {
	ended := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).Flush()
		var err error
		for err == nil {
			_, err = w.Write(make([]byte, 1<<10))
		}
		<-r.Context().Done()
		ended <- err
	})
	var work lifecycle.Group
	defer work.Close()
	resp, err := inProcessClient(t, h, &work).Get(testBaseURL + "/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-ended; err == nil {
		t.Error("the handler's write went on after the body was closed")
	}
}

// TestInProcessFinish: a handler that writes nothing answers 200 with an
// empty body; one that panics fails the round trip, and the process goes
// on; a body's Content-Length is the response's.
func TestInProcessFinish(t *testing.T) {
	var work lifecycle.Group
	defer work.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/empty", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusTeapot, []byte(`{"ok":true}`))
	})
	c := inProcessClient(t, mux, &work)
	resp, err := c.Get(testBaseURL + "/empty")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(b) != 0 {
		t.Errorf("/empty = %d %q %v, want 200 and nothing", resp.StatusCode, b, err)
	}
	if _, err := c.Get(testBaseURL + "/panic"); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("/panic = %v, want the panic as an error", err)
	}
	resp, err = c.Get(testBaseURL + "/json")
	if err != nil {
		t.Fatal(err)
	}
	b, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusTeapot || string(b) != `{"ok":true}` || resp.ContentLength != int64(len(b)) {
		t.Errorf("/json = %d %q (length %d) %v, want 418 and the body", resp.StatusCode, b, resp.ContentLength, err)
	}
}
