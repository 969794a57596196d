package testagent

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The commands of this file probe what privileges the agent's process
// holds: "try <attack>" makes one system call an agent that escapes its
// sandbox would (a packet socket, a device node, a ptrace, ...), undoes
// what it did where it worked, and reports "try <attack>: ok" or
// "try <attack>: error <why>"; "whoami" reports the process's user, its
// capability sets and its no_new_privs and seccomp state, from
// /proc/self/status. As with read and write, the turn goes on either way.
const (
	opTry    opKind = "try"
	opWhoami opKind = "whoami"
)

// attacks are what try can do, by name.
var attacks = map[string]func() error{
	// A packet socket reads every frame on the machine's interfaces:
	// other tenants' HTTP requests on loopback, bearer tokens and all.
	"packet": func() error {
		return closeFD(unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL))))
	},
	// An MPTCP socket is TCP that Landlock's TCP rules do not see: it
	// would bind and connect where they deny it.
	"mptcp": func() error { return closeFD(unix.Socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP)) },
	// A raw IP socket forges and reads packets of any protocol.
	"raw": func() error { return closeFD(unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)) },
	// A character device node copied from /dev/kmsg reads the kernel's
	// log wherever the sandbox allows the agent to write.
	"mknod-char": func() error {
		return mknodAndRemove("kmsg-copy", unix.S_IFCHR|0o600, int(unix.Mkdev(1, 11)))
	},
	// A FIFO is no attack: agents use mkfifo, and it must stay allowed.
	"mknod-fifo": func() error { return mknodAndRemove("probe-fifo", unix.S_IFIFO|0o600, 0) },
	"ptrace":     ptraceChild,
	"bpf": func() error {
		// BPF_MAP_CREATE of a one-entry array: type, key size, value
		// size, max entries, then the rest of union bpf_attr zeroed.
		attr := [32]uint32{2, 4, 4, 1}
		fd, _, errno := unix.Syscall(unix.SYS_BPF, 0, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		return closeFD(int(fd), errnoErr(errno))
	},
	"perf": func() error {
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Bits: unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
		attr.Size = uint32(unsafe.Sizeof(attr))
		return closeFD(unix.PerfEventOpen(&attr, 0, -1, -1, 0))
	},
	"keyctl": func() error {
		id, err := unix.AddKey("user", "skein-probe", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
		if err == nil {
			_, _ = unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0)
		}
		return err
	},
	// syslog(2) is dmesg: the kernel's log, with what other processes
	// made it print.
	"syslog": func() error {
		buf := make([]byte, 1<<16)
		_, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
		return err
	},
	"mount": func() error {
		dir, err := os.MkdirTemp(".", "probe-mount-")
		if err != nil {
			return err
		}
		defer os.Remove(dir)
		if err := unix.Mount("none", dir, "tmpfs", 0, ""); err != nil {
			return err
		}
		return unix.Unmount(dir, unix.MNT_DETACH)
	},
	// A network namespace of the calling thread's own; the thread is
	// then ended with its goroutine, never reused.
	"unshare": func() error {
		done := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // not unlocked: the thread ends with this goroutine
			done <- unix.Unshare(unix.CLONE_NEWNET)
		}()
		return <-done
	},
	// A child in a user namespace of its own, where it is root and may
	// mount, make namespaces and more. Go starts it with clone(2), whose
	// flags the filter sees.
	"userns": func() error {
		cmd := exec.Command("/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
		return cmd.Run()
	},
}

func init() {
	keywords[opTry] = func(o *op, args string) error {
		if _, ok := attacks[args]; !ok {
			return fmt.Errorf("unknown attack %q", args)
		}
		o.ID = args
		return nil
	}
	keywords[opWhoami] = parseNoArgs
	probes[opTry] = func(o op) string {
		if err := attacks[o.ID](); err != nil {
			return fmt.Sprintf("try %s: error %v", o.ID, err)
		}
		return fmt.Sprintf("try %s: ok", o.ID)
	}
	probes[opWhoami] = probeWhoami
}

// whoamiFields are the lines of /proc/self/status whoami reports.
var whoamiFields = []string{"Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"}

// probeWhoami reports "whoami: ok Uid=<real> Gid=<real> Groups=<list>
// CapInh=<hex> ... Seccomp=<mode>", each field as /proc/self/status has
// it (for Uid and Gid the first of its real, effective, saved and file
// system IDs; Groups with commas).
func probeWhoami(op) string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return fmt.Sprintf("whoami: error %v", err)
	}
	defer f.Close()
	got := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		switch {
		case k == "Uid" || k == "Gid":
			if len(fields) > 0 {
				got[k] = fields[0]
			}
		default:
			got[k] = strings.Join(fields, ",")
		}
	}
	var b strings.Builder
	b.WriteString("whoami: ok")
	for _, k := range whoamiFields {
		fmt.Fprintf(&b, " %s=%s", k, got[k])
	}
	return b.String()
}

// ptraceChild attaches to a child of its own, the least a debugger-like
// attack needs, and lets it go.
func ptraceChild() error {
	cmd := exec.Command("/bin/sleep", "60")
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start a child: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// A tracer is a thread: attach, wait and detach on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid := cmd.Process.Pid
	if err := unix.PtraceAttach(pid); err != nil {
		return err
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return err
	}
	return unix.PtraceDetach(pid)
}

func mknodAndRemove(name string, mode uint32, dev int) error {
	if err := unix.Mknod(name, mode, dev); err != nil {
		return err
	}
	return os.Remove(name)
}

// closeFD closes what a call that opens a descriptor returned.
func closeFD(fd int, err error) error {
	if err == nil {
		_ = unix.Close(fd)
	}
	return err
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
