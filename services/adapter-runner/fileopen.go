package adapterrunner

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"skein.dev/pkg/events"
)

// Opening a workspace's files, whose agent controls what they are
// (files.go says why): each name is Lstat'ed, opened with openFlags
// through the os.Root, fstat'ed and compared with the name again.

// openFlags are added to the flags of every open of a file in a
// workspace: no open blocks (a FIFO, a device), none follows a link
// itself, none leaks into an adapter.
const openFlags = syscall.O_NONBLOCK | syscall.O_NOFOLLOW | syscall.O_CLOEXEC

// openRegular opens the regular file p of root for reading, p reachable
// (no symbolic link on the way, not an upload in progress), and returns
// it with what it is.
func (s *fileStore) openRegular(root *os.Root, p string) (*os.File, fs.FileInfo, error) {
	if err := reachable(root, p); err != nil {
		return nil, nil, err
	}
	return s.open(root, p, os.O_RDONLY, false, "read")
}

// open opens p of root with flag and openFlags, and returns it with what
// it is: a directory when dir, else a regular file; anything else is
// refused at once, before any read or write, and so is a name that is
// (or became, after the open) a symbolic link. A regular file is handed
// back blocking, as a read of one always is on Linux.
func (s *fileStore) open(root *os.Root, p string, flag int, dir bool, what string) (*os.File, fs.FileInfo, error) {
	// A name that is not what is meant is not even opened: opening a
	// device calls its driver. (The fstat below catches a swap since.)
	l, err := root.Lstat(p)
	if err != nil {
		return nil, nil, fsError(what, p, err)
	}
	if err := s.wantKind(p, l, dir); err != nil {
		return nil, nil, err
	}
	if dir {
		flag |= syscall.O_DIRECTORY
	}
	f, err := root.OpenFile(p, flag|openFlags, 0)
	switch {
	case dir && errors.Is(err, syscall.ENOTDIR):
		// Made a file since the Lstat.
		s.ops.refused(refusedNotRegular)
		return nil, nil, events.Errorf(events.CodeInvalidRequest, "%q is not a directory", p)
	case errors.Is(err, syscall.ENXIO):
		// Made a FIFO without a reader (opened to write) or a device
		// without its hardware since the Lstat.
		s.ops.refused(refusedNotRegular)
		return nil, nil, events.Errorf(events.CodeInvalidRequest, "%q is not a regular file", p)
	case err != nil:
		return nil, nil, fsError(what, p, err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fsError(what, p, err)
	}
	if err := s.wantKind(p, info, dir); err != nil {
		f.Close()
		return nil, nil, err
	}
	// os.Root resolves a link in the last element within the root:
	// what was opened must be what the name is.
	if l, err := root.Lstat(p); err != nil || !os.SameFile(l, info) {
		f.Close()
		return nil, nil, events.Errorf(events.CodeInvalidRequest, "%q changed while it was opened", p)
	}
	if !dir {
		if rc, err := f.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _ = syscall.SetNonblock(int(fd), false) })
		}
	}
	return f, info, nil
}

// wantKind refuses info, the entry at p, unless it is a directory (dir)
// or a regular file (!dir).
func (s *fileStore) wantKind(p string, info fs.FileInfo, dir bool) error {
	m := info.Mode()
	switch {
	case m&fs.ModeSymlink != 0:
		return events.Errorf(events.CodeInvalidRequest, "%q is a symbolic link, which file operations do not follow", p)
	case dir && m.IsDir(), !dir && m.IsRegular():
		return nil
	case dir:
		s.ops.refused(refusedNotRegular)
		return events.Errorf(events.CodeInvalidRequest, "%q is not a directory", p)
	}
	s.ops.refused(refusedNotRegular)
	return events.Errorf(events.CodeInvalidRequest, "%q is not a regular file but %s", p, kindOf(m))
}

// kindOf names what a file that is not a regular one is.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a file that can be read"
}

// reachable refuses a path that the API does not show: one through a
// symbolic link, or into the uploads in progress.
func reachable(root *os.Root, p string) error {
	if p == attachmentIncomingAt || strings.HasPrefix(p, attachmentIncomingAt+"/") {
		return events.Errorf(events.CodeFileNotFound, "no file %q", p)
	}
	return noSymlinks(root, p, false)
}

// noSymlinks checks each element of the slash-separated path p under root
// with Lstat: a symbolic link is refused. A missing element is
// CodeFileNotFound, or, with missingOK, the end of the check (what follows
// will be created).
func noSymlinks(root *os.Root, p string, missingOK bool) error {
	if p == "." {
		return nil
	}
	at := ""
	for el := range strings.SplitSeq(p, "/") {
		at = path.Join(at, el)
		info, err := root.Lstat(at)
		if errors.Is(err, fs.ErrNotExist) && missingOK {
			return nil
		}
		if err != nil {
			return fsError("open", at, err)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			return events.Errorf(events.CodeInvalidRequest, "%q is a symbolic link, which file operations do not follow", at)
		}
	}
	return nil
}

// fsError turns a file system error into a typed one that names only the
// path the client gave: a missing file is CodeFileNotFound, a path the
// os.Root refuses (it escapes the directory) CodeInvalidRequest, and
// anything else CodeUnavailable, its cause (which may name the resolved
// directory) logged by the caller's endpoint only.
func fsError(what, p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return events.Errorf(events.CodeFileNotFound, "no file %q", p)
	case errors.Is(err, fs.ErrExist):
		return events.Errorf(events.CodeInvalidRequest, "%q exists", p)
	case errors.Is(err, fs.ErrPermission):
		return events.Errorf(events.CodeForbidden, "%s %q: permission denied", what, p)
	case strings.Contains(err.Error(), "escapes from parent") || strings.Contains(err.Error(), "path escapes"):
		return events.Errorf(events.CodeInvalidRequest, "%q lies outside the working directory", p)
	}
	return events.Errorf(events.CodeUnavailable, "%s %q failed", what, p)
}
