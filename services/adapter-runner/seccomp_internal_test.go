//go:build linux

package adapterrunner

import (
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
)

// Every call the filter names is one of amd64's or arm64's (a misspelt
// name would be skipped as one the architecture lacks, and let through),
// and the calls an agent most needs to be refused are on both.
func TestSeccompNamesAreSystemCalls(t *testing.T) {
	names := append([]string{"clone3"}, seccompDenied...)
	for _, c := range seccompConditional {
		names = append(names, c.Name)
	}
	for _, name := range names {
		_, amd := arch.X86_64.SyscallNames[name]
		_, arm := arch.AARCH64.SyscallNames[name]
		if !amd && !arm {
			t.Errorf("%q is no system call of amd64 or arm64", name)
		}
	}
	for _, name := range []string{"socket", "mknodat", "ptrace", "bpf", "perf_event_open", "keyctl", "mount", "unshare", "setns", "clone", "clone3", "syslog", "io_uring_setup"} {
		for _, a := range []*arch.Info{arch.X86_64, arch.AARCH64} {
			if _, ok := a.SyscallNames[name]; !ok {
				t.Errorf("%s lacks %s", a.Name, name)
			}
		}
	}
	if _, err := seccompProgram(); err != nil {
		t.Fatalf("the filter does not assemble: %v", err)
	}
}
