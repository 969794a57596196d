//go:build !linux

package workspace

import (
	"os"
	"syscall"

	"skein.dev/pkg/events"
)

// Open is Check, then the directory opened by name and checked again:
// without openat2 the open is not anchored, and a symlink swapped between
// the looks can still be followed (open_linux.go closes that).
func (r Roots) Open(ns events.Namespace, g Grants, what, p string, create bool) (*Dir, error) {
	resolved, err := r.Check(ns, g, what, p)
	if err != nil {
		return nil, err
	}
	if create {
		if err := os.MkdirAll(resolved, 0o700); err != nil {
			return nil, events.Errorf(events.CodeInvalidRequest, "%s %q cannot be created", what, trunc(p))
		}
	}
	f, err := os.Open(resolved)
	if err != nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "%s %q is not in the workspace of namespace %s", what, trunc(p), trunc(string(ns)))
	}
	if again, err := r.Check(ns, g, what, p); err != nil || again != resolved {
		f.Close()
		return nil, events.Errorf(events.CodeInvalidRequest, "%s %q is not in the workspace of namespace %s", what, trunc(p), trunc(string(ns)))
	}
	return &Dir{f: f, path: resolved}, nil
}

func dupCloexec(fd int) (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	nfd, err := syscall.Dup(fd)
	if err == nil {
		syscall.CloseOnExec(nfd)
	}
	return nfd, err
}
