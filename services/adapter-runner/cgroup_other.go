//go:build !linux

package adapterrunner

import (
	"errors"
	"log/slog"
	"syscall"
)

// Outside Linux there are no cgroups: an adapter is killed with its
// process group, and has no limits (the runner says so at start).

type cgroupHost struct{}

func findCgroups(*slog.Logger, string) *cgroupHost { return &cgroupHost{} }

func (*cgroupHost) contained() string { return "" }

func (*cgroupHost) limited(string) bool { return false }

func (*cgroupHost) where(string) string { return "" }

func (*cgroupHost) fromBirth() bool { return false }

func (*cgroupHost) open(string, Limits) (*adapterCgroup, error) { return nil, errors.ErrUnsupported }

func (*cgroupHost) reap() (cgroups, procs int) { return 0, 0 }

func (*cgroupHost) close() {}

type adapterCgroup struct{}

func (*adapterCgroup) attach(*syscall.SysProcAttr) {}

func (*adapterCgroup) procsFiles() []string { return nil }

func (*adapterCgroup) join(int) error { return nil }

func (*adapterCgroup) kill() int { return 0 }

func (*adapterCgroup) remove() error { return nil }

func (*adapterCgroup) hits() map[string]uint64 { return nil }
