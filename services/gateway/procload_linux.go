package gateway

import (
	"math"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// readProcLoad reads this process's load from /proc/self and getrlimit.
// A figure it cannot read is 0 (a limit of 0: none known).
func readProcLoad() procLoad {
	var l procLoad
	if entries, err := os.ReadDir("/proc/self/fd"); err == nil {
		l.fds = len(entries)
	}
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && lim.Cur < math.MaxInt32 {
		l.maxFDs = int(lim.Cur)
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				l.threads, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
	}
	l.maxThreads = goMaxThreads()
	// RLIMIT_NPROC counts the user's threads in every process: this one's
	// alone reaching it is the least it means.
	if unix.Getrlimit(unix.RLIMIT_NPROC, &lim) == nil && lim.Cur < uint64(l.maxThreads) {
		l.maxThreads = int(lim.Cur)
	}
	return l
}
