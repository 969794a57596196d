package adapterrunner_test

import (
	"path/filepath"
	"strings"
	"testing"

	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
)

// A working directory that holds a protected path, or lies in one, is what
// the sandbox cannot confine (it grants a directory whole): skein dev run
// in a project with its data directory inside. Under require the runner
// refuses the session; under warn it starts it and says so in its log.
// Other directories of the same workspace start as ever.
func TestProtectedPathsInAWorkingDirectory(t *testing.T) {
	for _, mode := range []adapterrunner.SandboxMode{adapterrunner.SandboxRequire, adapterrunner.SandboxWarn} {
		t.Run(string(mode), func(t *testing.T) {
			root := t.TempDir()
			proj := filepath.Join(root, "default", "proj")
			data := filepath.Join(proj, ".skein")
			mkdirs(t, filepath.Join(data, "nats"), filepath.Join(proj, "src"))
			h := startWith(t, adapterrunner.Config{
				Sandbox: mode, WorkspaceRoots: []string{root}, Protected: []string{filepath.Join(data, "nats")},
			})
			exposing := map[string]events.AcpCreateSessionRequest{
				"cwd holds it":             {Cwd: proj},
				"cwd lies in it":           {Cwd: filepath.Join(data, "nats")},
				"an extra directory holds": {Cwd: filepath.Join(proj, "src"), AdditionalDirectories: []string{proj}},
			}
			for name, req := range exposing {
				sid := "s-" + strings.ReplaceAll(name, " ", "-")
				_, err := h.createWith(t, sid, req)
				switch mode {
				case adapterrunner.SandboxRequire:
					if err == nil || events.AsError(err).Code != events.CodeInvalidRequest {
						t.Errorf("%s: create = %v, want %s", name, err, events.CodeInvalidRequest)
					}
				default:
					if err != nil {
						t.Errorf("%s: create = %v, want started with a warning", name, err)
					} else if !strings.Contains(h.logs.String(), "session_id="+sid) ||
						!strings.Contains(h.logs.String(), "exposes Skein's own data") {
						t.Errorf("%s: no warning in the runner's log:\n%s", name, h.logs.String())
					}
				}
			}
			// A directory beside the data is no exposure. (Under require on
			// a kernel without Landlock the sandbox refuses every adapter,
			// for another reason.)
			_, err := h.createWith(t, "beside", events.AcpCreateSessionRequest{Cwd: filepath.Join(proj, "src")})
			if err != nil && events.AsError(err).Code != events.CodeAgentUnavailable {
				t.Errorf("create in a directory beside the data = %v, want started", err)
			}
		})
	}
}
