package gateway

import (
	"encoding/json"
	"fmt"
	"math"
	"runtime/debug"
	"sync"
)

// A process out of descriptors cannot accept a connection, open a file or
// start an adapter, and one out of threads crashes (Go's runtime aborts
// past debug.SetMaxThreads): every tenant it serves fails. So /readyz
// says unready as the process nears either limit (Config.ReadyMaxLoad
// percent of it), and a load balancer sends new clients elsewhere while
// the process can still answer those it has. In skein dev and in a
// `skein serve` of several services, the process is the runner's too.

// Reasons /readyz gives, the values of the reason label of
// acp_gateway_unready_total.
const (
	unreadyStopping    = "stopping"
	unreadyNATS        = "nats_disconnected"
	unreadyDescriptors = "descriptors"
	unreadyThreads     = "threads"
)

var unreadyReasons = []string{unreadyStopping, unreadyNATS, unreadyStorageFull, unreadyDescriptors, unreadyThreads}

// procLoad is what the process holds of the two limits.
type procLoad struct {
	fds, maxFDs         int // open descriptors, RLIMIT_NOFILE (soft)
	threads, maxThreads int // threads, the lower of Go's limit and RLIMIT_NPROC (soft)
}

// goMaxThreads is the runtime's thread limit, read once: debug offers no
// getter, so it is set to itself.
var goMaxThreads = sync.OnceValue(func() int {
	n := debug.SetMaxThreads(math.MaxInt32)
	debug.SetMaxThreads(n)
	return n
})

// near returns why l is at or past percent of a limit, and which limit,
// or "" when it is not; percent 0 checks nothing.
func (l procLoad) near(percent int) (reason, status string) {
	if percent <= 0 {
		return "", ""
	}
	over := func(n, limit int) bool { return limit > 0 && n*100 >= limit*percent }
	switch {
	case over(l.fds, l.maxFDs):
		return unreadyDescriptors, fmt.Sprintf("near the descriptor limit: %d of %d open", l.fds, l.maxFDs)
	case over(l.threads, l.maxThreads):
		return unreadyThreads, fmt.Sprintf("near the thread limit: %d of %d", l.threads, l.maxThreads)
	}
	return "", ""
}

// unreadyBody is /readyz's answer for a process near a limit:
// {"status": what it holds of the limit, "reason": which limit}.
func unreadyBody(reason, status string) []byte {
	b, _ := json.Marshal(map[string]string{"status": status, "reason": reason}) // strings always encode
	return b
}
