package gateway_test

import (
	"net/http"
	"testing"
)

// TestProtocols: the gateway speaks HTTP/1.1, and HTTP/2 without TLS to a
// client that knows it does (h2c, prior knowledge).
func TestProtocols(t *testing.T) {
	e := newEnv(t, withoutBackend)
	for _, h2 := range []bool{false, true} {
		var p http.Protocols
		p.SetHTTP1(!h2)
		p.SetUnencryptedHTTP2(h2)
		tr := &http.Transport{Protocols: &p}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.url+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatalf("GET /healthz, HTTP/2 %v: %v", h2, err)
		}
		resp.Body.Close()
		tr.CloseIdleConnections()
		if want := map[bool]int{false: 1, true: 2}[h2]; resp.StatusCode != http.StatusOK || resp.ProtoMajor != want {
			t.Errorf("GET /healthz = %d over %s, want 200 over HTTP/%d", resp.StatusCode, resp.Proto, want)
		}
	}
}
