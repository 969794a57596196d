package adapterrunner

import (
	"fmt"
	"math/bits"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The adapter's seccomp filter. Landlock confines what an adapter reaches
// through the file system and TCP; it does not cover raw sockets, device
// nodes, ptrace, the kernel's log and keyrings, or namespaces, through
// which a shell agent once read another tenant's bearer token off
// loopback. The adapter holds no capability (privileges_linux.go), which
// the kernel asks for most of them; the filter refuses them all the same,
// where the kernel would let an unprivileged process (a child in a user
// namespace of its own, ptrace of its own child, unprivileged perf and
// keys, io_uring's socket) and as a second wall.
//
// The filter is a deny list, after the container runtimes' default
// profile (moby's): a coding agent runs compilers, interpreters, git and
// test suites, whose needs no allow list could name ahead. What it
// refuses no coding agent needs. It answers EPERM, not a kill, so that
// the agent's tool reports an error its model can read; clone3 gets
// ENOSYS, the answer of a kernel without it, on which the C library falls
// back to clone, whose flags the filter can read (clone3's lie in memory,
// out of a filter's reach).

// seccompDenied are refused EPERM whatever their arguments. Names a
// kernel architecture lacks (mknod on arm64) are skipped there.
var seccompDenied = []string{
	// Reading or changing other processes, its own children included.
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	// The kernel's programs, counters and fault handling: the usual
	// ground of kernel exploits.
	"bpf", "perf_event_open", "userfaultfd",
	// io_uring runs operations (socket among them) the filter never
	// sees; programs fall back to plain system calls without it.
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// Keyrings, shared by every process of a user.
	"keyctl", "add_key", "request_key",
	// Mounts and namespaces.
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "fsopen", "fsmount", "fsconfig", "fspick",
	"open_tree", "open_tree_attr", "mount_setattr", "setns",
	// The kernel's log (dmesg), modules, reboot and kexec.
	"syslog", "init_module", "finit_module", "delete_module", "create_module", "query_module", "get_kernel_syms",
	"kexec_load", "kexec_file_load", "reboot",
	// The machine's clock, swap, quotas, accounting, I/O ports.
	"settimeofday", "clock_settime", "clock_adjtime", "swapon", "swapoff", "quotactl", "quotactl_fd", "acct",
	"iopl", "ioperm",
	// Obsolete or privileged calls: files by handle (a way around
	// every path check), the old system control and status calls.
	"open_by_handle_at", "fanotify_init", "lookup_dcookie", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl",
}

// The flags of clone and unshare that make a namespace. clone3 is
// refused ENOSYS instead (the flags are out of reach); unshare also takes
// CLONE_NEWTIME, which clone reads as part of its exit signal.
const (
	namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
		unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	unshareFlags = namespaceFlags | unix.CLONE_NEWTIME
)

// socketTypeMask is the part of socket(2)'s type that is the type, the
// rest being SOCK_NONBLOCK and SOCK_CLOEXEC.
const socketTypeMask = 0xf

// seccompConditional are refused EPERM when their arguments match: each
// entry is one set of conditions that must all hold; entries for the same
// call are alternatives.
var seccompConditional = []seccomp.NameWithConditions{
	// Packet sockets, in any type, and raw sockets, in any family
	// (SOCK_PACKET is the old form of a packet socket).
	{Name: "socket", Conditions: eq32(0, unix.AF_PACKET)},
	{Name: "socket", Conditions: masked32(1, socketTypeMask, unix.SOCK_RAW)},
	{Name: "socket", Conditions: masked32(1, socketTypeMask, unix.SOCK_PACKET)},
	// MPTCP sockets, which Landlock's TCP rules do not see (they check
	// bind and connect for IPPROTO_TCP only). Go's net package, which
	// listens with MPTCP by default, falls back to TCP on any error, as
	// other callers do where a kernel has no MPTCP. (EPERM with the rest,
	// not EPROTONOSUPPORT: see the order of the groups in seccompPolicy.)
	{Name: "socket", Conditions: eq32(2, unix.IPPROTO_MPTCP)},
	// Device nodes, character and block: S_IFCHR's bit is in S_IFBLK,
	// and in no other file type mknod makes. FIFOs, sockets and regular
	// files stay allowed: agents use mkfifo.
	{Name: "mknod", Conditions: seccomp.ArgumentConditions{{Argument: 1, Operation: seccomp.BitsSet, Value: unix.S_IFCHR}}},
	{Name: "mknodat", Conditions: seccomp.ArgumentConditions{{Argument: 2, Operation: seccomp.BitsSet, Value: unix.S_IFCHR}}},
	// New namespaces: a user namespace makes its process root there,
	// with the rights to mount and to open raw sockets that this filter
	// and the missing capabilities deny outside it.
	{Name: "unshare", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unshareFlags}}},
	{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: namespaceFlags}}},
	// Typing into a terminal (the runner's, which /dev/tty reaches) as
	// if its user had.
	{Name: "ioctl", Conditions: eq32(1, unix.TIOCSTI)},
	{Name: "ioctl", Conditions: eq32(1, unix.TIOCLINUX)},
}

// eq32 is the condition that argument arg, as the 32-bit int the kernel
// reads, equals v. The upper half of the register is not compared: the
// kernel ignores it for an int, and a caller that set it would otherwise
// pass a 64-bit comparison unmatched.
func eq32(arg uint32, v uint32) seccomp.ArgumentConditions {
	return masked32(arg, 0xffffffff, v)
}

// masked32 is the condition that argument arg, masked with mask (in its
// lower 32 bits), equals v: each bit of v set, every other bit of mask
// clear. The library's BitsSet holds when any bit of its value is set,
// hence one condition per bit.
func masked32(arg, mask, v uint32) seccomp.ArgumentConditions {
	var c seccomp.ArgumentConditions
	for rest := v & mask; rest != 0; rest &= rest - 1 {
		bit := uint64(1) << bits.TrailingZeros32(rest)
		c = append(c, seccomp.Condition{Argument: arg, Operation: seccomp.BitsSet, Value: bit})
	}
	if clear := mask &^ v; clear != 0 {
		c = append(c, seccomp.Condition{Argument: arg, Operation: seccomp.BitsNotSet, Value: uint64(clear)})
	}
	return c
}

// seccompPolicy is the filter for the architecture info, this binary's,
// without what that architecture lacks.
func seccompPolicy(info *arch.Info) seccomp.Policy {
	has := func(name string) bool { _, ok := info.SyscallNames[name]; return ok }
	deny := seccomp.SyscallGroup{Action: seccomp.ActionErrno} // EPERM
	for _, name := range seccompDenied {
		if has(name) {
			deny.Names = append(deny.Names, name)
		}
	}
	for _, c := range seccompConditional {
		if has(c.Name) {
			deny.NamesWithCondtions = append(deny.NamesWithCondtions, c)
		}
	}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		// clone3 first: after a call's conditions fail, the library's
		// program goes on to the next group with an argument, not the
		// call's number, in its accumulator, so no group may follow one
		// with conditions (an mknod of mode 0663 would have matched
		// clone3's number).
		Syscalls: []seccomp.SyscallGroup{
			{Names: []string{"clone3"}, Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)},
			deny,
		},
	}
}

// seccompProgram assembles the filter for this binary's architecture.
// A system call of another one (an i386 call through int 0x80 on amd64,
// a 32-bit ARM call on arm64), whose numbers mean other calls, kills the
// process: no adapter of this architecture makes one, and the library's
// program lets them through to its default, allow. x32 calls, which share
// amd64's architecture number, the library answers ENOSYS.
func seccompProgram() ([]bpf.RawInstruction, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	policy := seccompPolicy(info)
	insts, err := policy.Assemble()
	if err != nil {
		return nil, err
	}
	prog := append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
	}, insts...)
	return bpf.Assemble(prog)
}

// installSeccomp installs the adapter's seccomp filter on every thread of
// this process (and so on the one that execs the adapter), which must
// have no_new_privs set (dropPrivileges).
func installSeccomp() error {
	raw, err := seccompProgram()
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	tid, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&prog)))
	switch {
	case errno != 0:
		return fmt.Errorf("install the filter: %w", errno)
	case tid != 0: // TSYNC's failure: a thread that could not take it
		return fmt.Errorf("install the filter: thread %d cannot take it", tid)
	}
	return nil
}
