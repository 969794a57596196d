package adapterrunner

import (
	"os"
	"os/exec"

	"skein.dev/internal/workspace"
)

// The launcher inherits the session's held working directories as
// descriptors 3, 4, …: the first of exec.Cmd.ExtraFiles, the cwd first.
// Whatever else the launcher inherits comes after them, numbered from
// 3 + len(policy.Workdirs).
const firstWorkdirFD = 3

// workdirFDs are the descriptor numbers of n held directories in the
// launcher.
func workdirFDs(n int) []int {
	fds := make([]int, n)
	for i := range fds {
		fds[i] = firstWorkdirFD + i
	}
	return fds
}

// workdirFiles are the held directories as the launcher inherits them.
func workdirFiles(held []*workspace.Dir) []*os.File {
	files := make([]*os.File, len(held))
	for i, d := range held {
		files[i] = d.File()
	}
	return files
}

// launched reports whether cmd runs the launcher, which takes the
// policy's working directories as inherited descriptors. An adapter run
// directly (unconfined) inherits none.
func (p sandboxPolicy) launched(cmd *exec.Cmd) bool {
	return len(p.Workdirs) > 0 && len(cmd.Args) > 0 && cmd.Args[0] == launcherName
}
