package adapterrunner

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// An adapter holds no privilege. The launcher, which may run as root (a
// runner started as root, skein dev by root), leaves the adapter no
// capability in any set (bounding, permitted, effective, inheritable,
// ambient), locks the securebits so that neither uid 0 nor an exec
// grants one back, sets no_new_privs (no set-user-ID binary or file
// capability raises anything either), and, where the policy names a
// user, becomes that user, of no supplementary group, first.
//
// Credentials and capabilities are each thread's: the launcher runs on
// one locked thread (launch), which is the one that execs the adapter.
// setgroups, setgid and setuid Go applies to every thread.

// The securebits (linux/securebits.h), which x/sys/unix does not name.
const (
	secbitNoRoot                  = 1 << 0
	secbitNoRootLocked            = 1 << 1
	secbitNoSetuidFixupLocked     = 1 << 3
	secbitKeepCapsLocked          = 1 << 5
	secbitNoCapAmbientRaise       = 1 << 6
	secbitNoCapAmbientRaiseLocked = 1 << 7
)

// adapterSecurebits: uid 0 gets no capability on exec, ambient
// capabilities cannot be raised, and a change of user clears the
// capabilities (the kernel's default, locked), all locked.
const adapterSecurebits = secbitNoRoot | secbitNoRootLocked | secbitNoSetuidFixupLocked |
	secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLocked

// dropCapabilities leaves this process no capability and no way to gain
// one, as the user p names (if any).
func dropCapabilities(p sandboxPolicy) error {
	parent := os.Getppid()
	caps, err := capabilities()
	if err != nil {
		return err
	}
	// The bounding set and the securebits need CAP_SETPCAP, which a
	// runner not started as root lacks; no_new_privs then keeps the
	// bounding set from ever mattering.
	bounded := caps.effective&(1<<unix.CAP_SETPCAP) != 0
	if bounded {
		if err := unix.Prctl(unix.PR_SET_SECUREBITS, adapterSecurebits, 0, 0, 0); err != nil {
			return fmt.Errorf("securebits: %w", err)
		}
		last, err := lastCap()
		if err != nil {
			return err
		}
		for c := 0; c <= last; c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear the ambient capabilities: %w", err)
	}
	if p.UID != 0 {
		if err := becomeUser(p.UID, p.GID, parent); err != nil {
			return err
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("clear the capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if caps, err = capabilities(); err != nil {
		return err
	}
	if !bounded {
		caps.bounding = 0
	}
	if caps != (capSets{}) {
		return fmt.Errorf("capabilities left after dropping them: %+v", caps)
	}
	return nil
}

// becomeUser makes this process user uid, of group gid and no other. A
// change of user clears the parent death signal the runner asked for
// (prctl(2)), so it is asked for again; a runner that died in between
// is no longer this process's parent, and the adapter is not started.
func becomeUser(uid, gid, parent int) error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("setgid %d: %w", gid, err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent death signal: %w", err)
	}
	if os.Getppid() != parent {
		return errors.New("the runner died while the adapter started")
	}
	return nil
}

// capSets are a thread's capability sets, as bit masks.
type capSets struct{ effective, permitted, inheritable, ambient, bounding uint64 }

// capabilities reads this thread's capability sets from
// /proc/thread-self/status.
func capabilities() (capSets, error) {
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return capSets{}, fmt.Errorf("read the capabilities: %w", err)
	}
	var c capSets
	fields := map[string]*uint64{"CapEff": &c.effective, "CapPrm": &c.permitted, "CapInh": &c.inheritable, "CapAmb": &c.ambient, "CapBnd": &c.bounding}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if dst, ok := fields[k]; ok {
			if *dst, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64); err != nil {
				return capSets{}, fmt.Errorf("read the capabilities: %s: %w", k, err)
			}
		}
	}
	return c, nil
}

// lastCap is the highest capability this kernel knows.
func lastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("the kernel's last capability: %w", err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
