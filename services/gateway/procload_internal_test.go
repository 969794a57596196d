package gateway

import (
	"runtime"
	"strings"
	"testing"
)

// near says which limit a load is near, descriptors first, and nothing
// below the percent or with the check off.
func TestProcLoadNear(t *testing.T) {
	for _, c := range []struct {
		load    procLoad
		percent int
		want    string
	}{
		{procLoad{fds: 89, maxFDs: 100, threads: 10, maxThreads: 10000}, 90, ""},
		{procLoad{fds: 90, maxFDs: 100, threads: 10, maxThreads: 10000}, 90, unreadyDescriptors},
		{procLoad{fds: 10, maxFDs: 100, threads: 9000, maxThreads: 10000}, 90, unreadyThreads},
		{procLoad{fds: 95, maxFDs: 100, threads: 9500, maxThreads: 10000}, 90, unreadyDescriptors},
		{procLoad{fds: 95, maxFDs: 100, threads: 9500, maxThreads: 10000}, 0, ""},
		{procLoad{fds: 95, threads: 9500}, 90, ""}, // no limit known
	} {
		reason, status := c.load.near(c.percent)
		if reason != c.want || (reason != "") != (status != "") {
			t.Errorf("%+v at %d%%: %q %q, want %q", c.load, c.percent, reason, status, c.want)
		}
	}
	if _, status := (procLoad{threads: 9100, maxThreads: 10000}).near(90); !strings.Contains(status, "9100 of 10000") {
		t.Errorf("status %q does not say what it holds of the limit", status)
	}
	if runtime.GOOS != "linux" {
		return // no /proc: readProcLoad knows nothing
	}
	if l := readProcLoad(); l.fds == 0 || l.maxFDs == 0 || l.threads == 0 || l.maxThreads == 0 {
		t.Errorf("readProcLoad = %+v: a figure not read", l)
	}
}
