package testutil

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// VerifyNone fails tb if a goroutine is running that opts do not ignore,
// as goleak.VerifyNone does, except for the goroutines of an embedded
// nats-server (those with a function of the server's package on their
// stack). A test that stops a service on a server that keeps running
// cannot tell the server's goroutines from the service's by when they
// started: the server starts and ends some (a stream's loops, a
// consumer's, a client connection's) as the service creates and deletes
// them. Take goleak.IgnoreCurrent before the service starts, and pass it.
//
// The server's goroutines are found afresh at each look, and the look is
// repeated until it finds no other goroutine, within PollTimeout: a
// goroutine that is ending (a subscription being drained) is given the
// time to end.
func VerifyNone(tb testing.TB, opts ...goleak.Option) {
	tb.Helper()
	var leak error
	err := Poll(context.WithoutCancel(tb.Context()), "no goroutine to be left", func() (bool, error) {
		leak = goleak.Find(append(serverGoroutines(), opts...)...)
		return leak == nil, nil
	})
	if err != nil {
		tb.Errorf("%v: %v", err, leak)
	}
}

// natsServerPackage prefixes the functions of the nats-server module.
const natsServerPackage = "github.com/nats-io/nats-server/v2/"

// serverGoroutines returns an option for each goroutine running a function
// of nats-server now, that ignores the goroutines with that function on
// their stack.
func serverGoroutines() []goleak.Option {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	seen := map[string]bool{}
	var opts []goleak.Option
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		for line := range strings.SplitSeq(g, "\n") {
			// Function lines are the unindented ones; "created by" names
			// the creator, which belongs to another goroutine's stack.
			if !strings.HasPrefix(line, natsServerPackage) {
				continue
			}
			i := strings.LastIndexByte(line, '(')
			if i < 0 {
				continue
			}
			if f := line[:i]; !seen[f] {
				seen[f] = true
				opts = append(opts, goleak.IgnoreAnyFunction(f))
			}
			break
		}
	}
	return opts
}
