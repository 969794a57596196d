package layout

import (
	"os/exec"
	"strings"
	"testing"
)

// services are the programs that meet only on NATS: none of them imports
// another. Their tests may (the gateway's run the real session, history and
// runner services), so a module requiring another service proves nothing,
// and only this test notices a production import of one.
var services = []string{"adapter-runner", "gateway", "history", "notify", "session"}

func TestServicesMeetOnlyOnNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, svc := range services {
		pkg := "skein.dev/services/" + svc
		out, err := exec.Command("go", "list", "-deps", pkg, pkg+"/...").CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for dep := range strings.FieldsSeq(string(out)) {
			if strings.HasPrefix(dep, "skein.dev/services/") && dep != pkg && !strings.HasPrefix(dep, pkg+"/") {
				t.Errorf("%s imports %s in its production code: services meet only on NATS", pkg, dep)
			}
		}
	}
}
