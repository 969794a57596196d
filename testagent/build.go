package testagent

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// Build compiles the skein-testagent binary into dir and returns its path,
// for tests that run the agent as a real process. It needs the go command.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "skein-testagent")
	out, err := exec.Command("go", "build", "-o", bin, "skein.dev/testagent/cmd/skein-testagent").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build skein-testagent: %v\n%s", err, out)
	}
	return bin, nil
}
