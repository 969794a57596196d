package adapterrunner

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/lifecycle"
	"skein.dev/pkg/events"
)

// What files.go relies on of os.Root (Go 1.26): the flags of OpenFile
// reach openat, so a FIFO opens without waiting for a writer, and one
// opened to write without a reader fails ENXIO at once; a symbolic link
// out of the root is refused; and one within the root is followed by
// os.Root itself, O_NOFOLLOW notwithstanding, which is why open compares
// what it opened with the name's Lstat.
func TestRootOpenFlags(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{filepath.Join(dir, "file"): "in", filepath.Join(outside, "secret"): "out"} {
		if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"in": "file", "out": filepath.Join(outside, "secret"), "up": "../" + filepath.Base(outside) + "/secret"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()

	f, err := root.OpenFile("fifo", os.O_RDONLY|openFlags, 0) // returns: no writer is waited for
	if err != nil {
		t.Fatal(err)
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("fstat of the FIFO opened = %v, %v", st, err)
	}
	f.Close()
	if _, err := root.OpenFile("fifo", os.O_WRONLY|openFlags, 0); !errors.Is(err, syscall.ENXIO) {
		t.Errorf("a FIFO without a reader opened to write = %v, want ENXIO", err)
	}
	for _, link := range []string{"out", "up"} {
		if _, err := root.OpenFile(link, os.O_RDONLY|openFlags, 0); err == nil || !strings.Contains(err.Error(), "escapes") {
			t.Errorf("a link out of the root opened = %v, want it refused", err)
		}
	}
	if f, err := root.OpenFile("in", os.O_RDONLY|openFlags, 0); err != nil {
		t.Errorf("a link within the root, O_NOFOLLOW = %v: os.Root no longer follows it (open's Lstat check may go)", err)
	} else {
		f.Close()
	}

	cfg := Config{}.WithDefaults()
	s := newFileStore(cfg, newFileOps(cfg, &lifecycle.Group{}, newMetrics(prometheus.NewRegistry(), nil, 1).fileRefusals))
	for p, want := range map[string]string{"fifo": "a FIFO", "in": "symbolic link", ".": "a directory"} {
		if _, _, err := s.open(root, p, os.O_RDONLY, false, "read"); events.AsError(err).Code != events.CodeInvalidRequest || !strings.Contains(err.Error(), want) {
			t.Errorf("open %q = %v, want invalid_request naming %s", p, err, want)
		}
	}
	if _, _, err := s.open(root, "file", os.O_RDONLY, true, "list"); events.AsError(err).Code != events.CodeInvalidRequest {
		t.Errorf("open a file as a directory = %v, want invalid_request", err)
	}
	f, _, err = s.open(root, "file", os.O_RDONLY, false, "read")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rc, _ := f.SyscallConn()
	var flags uintptr
	_ = rc.Control(func(fd uintptr) { flags, _, _ = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0) })
	if flags&syscall.O_NONBLOCK != 0 {
		t.Errorf("a regular file opened for reading is left O_NONBLOCK")
	}
}
