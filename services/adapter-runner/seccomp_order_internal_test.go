package adapterrunner

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The filter, installed in a child of the test: a call whose arguments
// its conditions test and pass is allowed whatever value they hold, one
// equal to clone3's number included (the library's program keeps an
// argument in its accumulator after a call's conditions fail), and the
// calls it refuses are refused.
func TestSeccompConditionsLeaveOtherCallsAlone(t *testing.T) {
	if os.Getenv("SKEIN_SECCOMP_CHILD") == "1" {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := installSeccomp(); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		// A regular file made by mknod, its mode clone3's number.
		if err := unix.Mknod(dir+"/f", unix.SYS_CLONE3, 0); err != nil {
			t.Errorf("mknod of mode %#o: %v, want allowed", unix.SYS_CLONE3, err)
		}
		if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0); err != nil {
			t.Errorf("a TCP socket: %v, want allowed", err)
		} else {
			unix.Close(fd)
		}
		if _, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP); err != unix.EPERM {
			t.Errorf("an MPTCP socket: %v, want EPERM", err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSeccompConditionsLeaveOtherCallsAlone$", "-test.v")
	cmd.Env = append(os.Environ(), "SKEIN_SECCOMP_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("the child under the filter: %v\n%s", err, out)
	}
}
