package adapterrunner

import (
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Bounds of what a failed start reports of the agent's own words.
const (
	startLogLines     = 5       // first lines on stdout that are not ACP
	startLogLineBytes = 200     // of each
	startLogStderr    = 2 << 10 // the last bytes of stderr
)

// startLog keeps what an adapter said before its ACP session opened, other
// than ACP: its first lines on stdout that are not JSON-RPC (a banner, its
// usage) and the tail of its stderr (a missing key, a crash). An agent that
// never answers initialize, or exits, is then reported with its own words
// rather than a bare timeout. It keeps nothing once the session is open.
type startLog struct {
	mu     sync.Mutex
	open   bool // the session opened: keep nothing more
	stdout []string
	stderr []byte
	cut    bool // stderr lost its beginning
}

// junk keeps line, a line of stdout that is not ACP, if it is among the
// first startLogLines.
func (l *startLog) junk(line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open || len(l.stdout) >= startLogLines {
		return
	}
	if len(line) > startLogLineBytes {
		line = line[:startLogLineBytes]
	}
	l.stdout = append(l.stdout, string(line))
}

// write keeps the last startLogStderr bytes of stderr.
func (l *startLog) write(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open {
		return
	}
	if len(b) >= startLogStderr {
		l.stderr, l.cut = append(l.stderr[:0], b[len(b)-startLogStderr:]...), true
		return
	}
	if drop := len(l.stderr) + len(b) - startLogStderr; drop > 0 {
		l.stderr, l.cut = append(l.stderr[:0], l.stderr[drop:]...), true
	}
	l.stderr = append(l.stderr, b...)
}

// opened drops what was kept and keeps nothing more.
func (l *startLog) opened() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open, l.stdout, l.stderr = true, nil, nil
}

// String is what was kept, to end an error message: `; it wrote: "…",
// "…"; stderr: "…"` (starting "..." when cut), each part only when there
// is something in it. The
// text is quoted, so it holds no line break (micro errors travel in a
// header).
func (l *startLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for i, line := range l.stdout {
		if i == 0 {
			b.WriteString("; it wrote: ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(line))
	}
	if tail := strings.TrimSpace(string(l.stderr)); tail != "" {
		if l.cut {
			tail = "..." + tail
		}
		b.WriteString("; stderr: ")
		b.WriteString(strconv.Quote(tail))
	}
	return b.String()
}

// deniedLine finds, in a line of stderr, an error of access refused
// (EACCES, EPERM, or their strerror texts), as node, Python, Go and a shell
// print it.
var deniedLine = regexp.MustCompile(`(?i)\b(EACCES|EPERM)\b|permission denied|operation not permitted`)

// deniedPath finds the path such a line names: quoted ('/x' or "/x", as
// node and Python print it) or bare (open /x: permission denied).
var deniedPath = regexp.MustCompile(`'(/[^']*)'|"(/[^"]*)"|(?:^|[\s(])(/[^\s:'",()]+)`)

// denied reports whether the adapter's stderr says it was refused access
// to a file, and the first path it names so, "" if none.
func (l *startLog) denied() (path string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for line := range strings.Lines(string(l.stderr)) {
		if !deniedLine.MatchString(line) {
			continue
		}
		ok = true
		if m := deniedPath.FindStringSubmatch(line); m != nil {
			return m[1] + m[2] + m[3], true
		}
	}
	return "", ok
}
