package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	adapterrunner "skein.dev/services/adapter-runner"
)

// One principal begins every upload it can, 8 in each of its sessions,
// none ever written (each holds its slot for the TTL): the runner stops
// it at its own bound, and the other tenants still upload, through the
// gateway and the session service (which carry the principal to the
// runner). Deleting one of its sessions frees that session's slots at
// once.
func TestSecurityUploadSlotsOverHTTP(t *testing.T) {
	e := newEnv(t, withConfig(withTokens))
	alice := func(method, path, body string) response {
		return e.send(method, path, body, bearer(adminToken), "X-Skein-Namespace", "team")
	}
	begin := func(send func(method, path, body string) response, sid string) response {
		return send(http.MethodPost, "/v1/sessions/"+sid+"/files/uploads", `{"name":"u.bin","size":10}`)
	}
	const sessions = 10
	took, refused := 0, 0
	for i := range sessions {
		sid := fmt.Sprintf("a%02d", i)
		if r := alice(http.MethodPut, "/v1/sessions/"+sid, `{"agent":"demo"}`); r.status != http.StatusOK {
			t.Fatalf("open %s = %d %s", sid, r.status, r.body)
		}
		for range 8 {
			switch r := begin(alice, sid); {
			case r.status == http.StatusOK:
				took++
			case r.status == http.StatusTooManyRequests && strings.Contains(string(r.body), "uploads"):
				refused++
			default:
				t.Fatalf("begin in %s = %d %s", sid, r.status, r.body)
			}
		}
	}
	t.Logf("alice began %d uploads, %d refused", took, refused)
	if took > adapterrunner.DefaultUploadsPerPrincipal {
		t.Errorf("alice holds %d uploads, more than a principal's %d", took, adapterrunner.DefaultUploadsPerPrincipal)
	}
	others := map[string]func(method, path, body string) response{
		"bob": func(method, path, body string) response { return e.send(method, path, body, bearer(userToken)) },
		"dave": func(method, path, body string) response {
			return e.send(method, path, body, bearer(otherToken), "X-Skein-Namespace", string(otherNS))
		},
	}
	for who, send := range others {
		if r := send(http.MethodPut, "/v1/sessions/"+who, `{"agent":"demo"}`); r.status != http.StatusOK {
			t.Fatalf("open %s = %d %s", who, r.status, r.body)
		}
		if r := begin(send, who); r.status != http.StatusOK {
			t.Errorf("%s's upload while alice holds %d = %d %s", who, took, r.status, r.body)
		}
	}

	// Alice deletes a session that holds uploads: she may begin as many
	// again.
	if r := alice(http.MethodDelete, "/v1/sessions/a00", ""); r.status != http.StatusOK {
		t.Fatalf("delete = %d %s", r.status, r.body)
	}
	if r := alice(http.MethodPut, "/v1/sessions/b00", `{"agent":"demo"}`); r.status != http.StatusOK {
		t.Fatalf("open b00 = %d %s", r.status, r.body)
	}
	again := 0
	for range 8 {
		if r := begin(alice, "b00"); r.status == http.StatusOK {
			again++
		}
	}
	if again != 8 {
		t.Errorf("after deleting a session of 8 uploads, alice began %d, want 8", again)
	}
}
