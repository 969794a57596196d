package gateway_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestServicesMeetOnlyOnNATS: the gateway's production code imports no
// other service. Its tests run the real session, history and runner
// services (stack_test.go), so the module requires them, and nothing but
// this test would notice a production import of one.
func TestServicesMeetOnlyOnNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "skein.dev/services/gateway", "skein.dev/services/gateway/internal/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		if strings.HasPrefix(dep, "skein.dev/services/") && !strings.HasPrefix(dep, "skein.dev/services/gateway") {
			t.Errorf("the gateway's production code imports %s: services meet only on NATS", dep)
		}
	}
}
