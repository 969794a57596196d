package gateway_test

import (
	"net/http"
	"testing"

	"skein.dev/internal/buildinfo"
)

// TestHealthzNamesTheVersion: the liveness probe answers the gateway
// binary's version, which skein info shows, without a token.
func TestHealthzNamesTheVersion(t *testing.T) {
	e := newEnv(t)
	r := e.do(http.MethodGet, "/healthz", "")
	if want := `{"status":"ok","version":"` + buildinfo.Version() + `"}`; r.status != http.StatusOK || string(r.body) != want {
		t.Errorf("GET /healthz = %d %s, want 200 %s", r.status, r.body, want)
	}
}
