package main

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
)

// TestServeUntilDoneWaitsForHandlers: serveUntilDone returns only once the
// handler in flight when ctx ended has returned, whether shutdown ends
// the request's context (a profile in progress) or lets it finish (a
// metrics scrape).
func TestServeUntilDoneWaitsForHandlers(t *testing.T) {
	for _, cancelRequests := range []bool{true, false} {
		t.Run(map[bool]string{true: "cancel", false: "finish"}[cancelRequests], func(t *testing.T) {
			ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			entered, release := make(chan struct{}), make(chan struct{})
			var returned atomic.Bool
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer returned.Store(true)
				close(entered)
				select {
				case <-r.Context().Done():
				case <-release:
				}
			})}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- serveUntilDone(ctx, srv, ln, cancelRequests) }()

			tr := &http.Transport{DisableKeepAlives: true}
			defer tr.CloseIdleConnections()
			got := make(chan error, 1)
			go func() {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
				if err == nil {
					var resp *http.Response
					if resp, err = (&http.Client{Transport: tr}).Do(req); err == nil {
						_ = resp.Body.Close()
					}
				}
				got <- err
			}()
			<-entered
			cancel()
			if !cancelRequests {
				// The handler finishes on its own, after shutdown began.
				close(release)
			}
			if err := <-done; err != nil {
				t.Errorf("serveUntilDone = %v, want nil", err)
			}
			if !returned.Load() {
				t.Error("serveUntilDone returned before the handler in flight")
			}
			if err := <-got; err != nil {
				t.Errorf("request in flight at shutdown = %v, want its answer", err)
			}
		})
	}
}
