package natstest

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// testLogger gives a test's log what a server says of its clients once it
// runs: warnings, errors, and the notices that name a fault (a slow
// consumer, a lost leader, a store that refuses writes). Go prints them
// only for a failed test, or with -v: they are a failure's evidence, not
// its noise. After the test's end it drops what it is told.
type testLogger struct {
	tb   testing.TB
	name string

	mu   sync.Mutex
	done bool
}

// noteworthy are the parts of a notice that make it evidence.
var noteworthy = []string{"Slow Consumer", "slow consumer", "leader", "insufficient", "Stale", "rror"}

// attachLogger makes ns log to tb until tb's cleanup ends it.
func attachLogger(tb testing.TB, ns *server.Server, name string) func() {
	l := &testLogger{tb: tb, name: name}
	ns.SetLoggerV2(l, false, false, false)
	return func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	}
}

func (l *testLogger) logf(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.tb.Logf("nats-server %s: %s: %s", l.name, level, fmt.Sprintf(format, v...))
}

func (l *testLogger) Noticef(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	for _, w := range noteworthy {
		if strings.Contains(msg, w) {
			l.logf("notice", "%s", msg)
			return
		}
	}
}
func (l *testLogger) Warnf(format string, v ...any)  { l.logf("warning", format, v...) }
func (l *testLogger) Errorf(format string, v ...any) { l.logf("error", format, v...) }
func (l *testLogger) Fatalf(format string, v ...any) { l.logf("fatal", format, v...) }
func (l *testLogger) Debugf(string, ...any)          {}
func (l *testLogger) Tracef(string, ...any)          {}
