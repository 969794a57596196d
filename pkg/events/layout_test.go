package events_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependenciesPointOneWay holds the contract's layout: dependencies
// point one way, events, then the packages built on it (which the compiler
// keeps from being imported back), then the services, then cmd/skein. So no
// package under pkg/events or pkg/client depends on a service or on the
// binary.
func TestDependenciesPointOneWay(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		return strings.Fields(string(out))
	}
	out, err := exec.Command("go", "list", "skein.dev/pkg/events/...", "skein.dev/pkg/client/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for pkg := range strings.FieldsSeq(string(out)) {
		for _, dep := range deps(pkg) {
			if strings.HasPrefix(dep, "skein.dev/services/") || strings.HasPrefix(dep, "skein.dev/cmd/") {
				t.Errorf("%s imports %s: libraries come before the services and the binary", pkg, dep)
			}
		}
	}
}
