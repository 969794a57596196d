package events_test

import (
	"errors"
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

func TestSubjects(t *testing.T) {
	const (
		ns  events.Namespace = "team-a"
		sid events.SessionID = "Main_1"
	)
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"LogSubject ev", events.LogSubject(ns, sid, events.LogEvents), "acp.log.team-a.Main_1.ev"},
		{"LogSubject ctl", events.LogSubject(ns, sid, events.LogControl), "acp.log.team-a.Main_1.ctl"},
		{"LogFilter", events.LogFilter(ns, sid), "acp.log.team-a.Main_1.>"},
		{"KeySubject", events.KeySubject(ns, sid, "k1"), "acp.log.team-a.Main_1.key.6ab9f1eb8f7d3388f4f9d586f66e99fd"},
		{"TailSubject", events.TailSubject(ns, sid, events.LogEvents), "acp.tail.team-a.Main_1.ev"},
		{"LiveSubject", events.LiveSubject(ns, sid), "acp.live.team-a.Main_1"},
		{"IOSubject", events.IOSubject(ns, sid, "laptop"), "acp.io.team-a.Main_1.laptop"},
		{"IOSessionSubjects", events.IOSessionSubjects(ns, sid), "acp.io.team-a.Main_1.*"},
		{"IOTailSubject", events.IOTailSubject(ns, sid), "acp.iotail.team-a.Main_1.*"},
		{"SessionKey", events.SessionKey(ns, sid), "team-a.Main_1"},
		{"APISubject", events.APISubject(ns, events.OpPrompt), "acp.api.team-a.prompt"},
		{"APIWildcard", events.APIWildcard(events.OpReadHistory), "acp.api.*.read_history"},
		{"RunnerSubject", events.RunnerSubject("r-1", events.RunnerPrompt), "acp.runner.r-1.prompt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("%s = %q, want %q", tt.name, tt.got, tt.want)
			}
		})
	}
}

func TestNamespaceFromAPISubject(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     events.Namespace
		wantCode events.Code // "" means success
	}{
		{"ok", "acp.api.team-a.prompt", "team-a", ""},
		{"too few tokens", "acp.api.prompt", "", events.CodeInvalidRequest},
		{"too many tokens", "acp.api.a.b.prompt", "", events.CodeInvalidRequest},
		{"other domain", "acp.log.a.prompt", "", events.CodeInvalidRequest},
		{"other prefix", "xyz.api.a.prompt", "", events.CodeInvalidRequest},
		{"invalid namespace", "acp.api.A.prompt", "", events.CodeInvalidNamespace},
		{"wildcard namespace", "acp.api.*.prompt", "", events.CodeInvalidNamespace},
		// An empty token is an error, not DefaultNamespace.
		{"empty namespace", "acp.api..prompt", "", events.CodeInvalidNamespace},
		{"forwarded", "acp.owner.R1.team-a.prompt", "team-a", ""},
		{"forwarded, no replica", "acp.owner.team-a.prompt", "", events.CodeInvalidRequest},
		{"forwarded, invalid namespace", "acp.owner.R1.A.prompt", "", events.CodeInvalidNamespace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.NamespaceFromAPISubject(tt.in)
			if tt.wantCode == "" {
				if got != tt.want || err != nil {
					t.Errorf("NamespaceFromAPISubject(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.want)
				}
				return
			}
			if got != "" || !errors.Is(err, &events.Error{Code: tt.wantCode}) {
				t.Errorf("NamespaceFromAPISubject(%q) = %q, %v; want \"\", %s", tt.in, got, err, tt.wantCode)
			}
		})
	}
}

// TestSubjectTokensTable runs the FuzzSubjectTokens property over the ID
// tables, so that it runs in every plain `go test`.
func TestSubjectTokensTable(t *testing.T) {
	for _, n := range namespaceTests {
		for _, s := range sessionIDTests {
			checkSubjectTokens(t, n.in, s.in)
		}
	}
}

// FuzzSubjectTokens checks, for any pair of strings, that Valid agrees with
// an independent spelling of the ID grammars, that the parsers reject what
// is invalid, and that valid IDs always yield subjects with exactly the
// expected tokens: no wildcard, no white space, no escaping.
func FuzzSubjectTokens(f *testing.F) {
	for _, n := range namespaceTests {
		f.Add(n.in, sessionIDTests[0].in)
	}
	for _, s := range sessionIDTests {
		f.Add(namespaceTests[0].in, s.in)
	}
	f.Fuzz(func(t *testing.T, ns, sid string) {
		checkSubjectTokens(t, ns, sid)
	})
}

func checkSubjectTokens(t *testing.T, ns, sid string) {
	t.Helper()
	nsOK, sidOK := namespaceOracle(ns), sessionIDOracle(sid)
	if got := events.Namespace(ns).Valid(); got != nsOK {
		t.Fatalf("Namespace(%q).Valid() = %v, want %v", ns, got, nsOK)
	}
	if got := events.SessionID(sid).Valid(); got != sidOK {
		t.Fatalf("SessionID(%q).Valid() = %v, want %v", sid, got, sidOK)
	}
	if got := events.RunnerID(sid).Valid(); got != sidOK {
		t.Fatalf("RunnerID(%q).Valid() = %v, want %v", sid, got, sidOK)
	}
	if p, err := events.ParseNamespace(ns); ns != "" && (nsOK != (err == nil) || nsOK && string(p) != ns) {
		t.Fatalf("ParseNamespace(%q) = %q, %v; valid = %v", ns, p, err, nsOK)
	}
	if p, err := events.ParseSessionID(sid); sid != "" && (sidOK != (err == nil) || sidOK && string(p) != sid) {
		t.Fatalf("ParseSessionID(%q) = %q, %v; valid = %v", sid, p, err, sidOK)
	}
	if !nsOK || !sidOK {
		return
	}

	n, s := events.Namespace(ns), events.SessionID(sid)
	subjects := []struct {
		name     string
		subject  string
		tokens   []string // "" matches any token (the fixed names)
		wildcard int      // index of the one expected wildcard token, or -1
		filter   string   // a stream or subscription filter that must match
	}{
		{"LogSubject", events.LogSubject(n, s, events.LogEvents), []string{"acp", "log", ns, sid, "ev"}, -1, events.LogSubjectsAll},
		{"LogSubject", events.LogSubject(n, s, events.LogControl), []string{"acp", "log", ns, sid, "ctl"}, -1, events.LogFilter(n, s)},
		{"LogFilter", events.LogFilter(n, s), []string{"acp", "log", ns, sid, ">"}, 4, events.LogSubjectsAll},
		{"KeySubject", events.KeySubject(n, s, "a key"), []string{"acp", "log", ns, sid, "key", ""}, -1, events.LogFilter(n, s)},
		{"TailSubject", events.TailSubject(n, s, events.LogEvents), []string{"acp", "tail", ns, sid, "ev"}, -1, events.TailSubjectsAll},
		{"LiveSubject", events.LiveSubject(n, s), []string{"acp", "live", ns, sid}, -1, events.LiveSubjectsAll},
		{"IOSubject", events.IOSubject(n, s, events.RunnerID(sid)), []string{"acp", "io", ns, sid, sid}, -1, events.IOSessionSubjects(n, s)},
		{"IOSessionSubjects", events.IOSessionSubjects(n, s), []string{"acp", "io", ns, sid, "*"}, 4, events.IOSubjectsAll},
		{"IOTailSubject", events.IOTailSubject(n, s), []string{"acp", "iotail", ns, sid, "*"}, 4, events.IOTailAll},
		{"SessionKey", events.SessionKey(n, s), []string{ns, sid}, -1, ""},
		{"APISubject", events.APISubject(n, events.OpPrompt), []string{"acp", "api", ns, "prompt"}, -1, events.APIWildcard(events.OpPrompt)},
		{"RunnerSubject", events.RunnerSubject(events.RunnerID(sid), events.RunnerStop), []string{"acp", "runner", sid, "stop"}, -1, ""},
	}
	for _, x := range subjects {
		got := strings.Split(x.subject, ".")
		if len(got) != len(x.tokens) {
			t.Fatalf("%s(%q, %q) = %q: %d tokens, want %d", x.name, ns, sid, x.subject, len(got), len(x.tokens))
		}
		for i, tok := range got {
			if x.tokens[i] != "" && tok != x.tokens[i] {
				t.Fatalf("%s(%q, %q) = %q: token %d is %q, want %q", x.name, ns, sid, x.subject, i, tok, x.tokens[i])
			}
			if i != x.wildcard && strings.ContainsAny(tok, "*>") {
				t.Fatalf("%s(%q, %q) = %q: token %d is a wildcard", x.name, ns, sid, x.subject, i)
			}
			if tok == "" || strings.ContainsAny(tok, " \t\r\n\f\v") {
				t.Fatalf("%s(%q, %q) = %q: token %d is empty or has white space", x.name, ns, sid, x.subject, i)
			}
		}
		if x.filter != "" && !subjectMatches(x.filter, x.subject) {
			t.Fatalf("%s(%q, %q) = %q is not matched by %q", x.name, ns, sid, x.subject, x.filter)
		}
	}
	// One session's filter never reaches another session's records.
	if other := events.SessionID(sid + "x"); other.Valid() {
		if subjectMatches(events.LogFilter(n, s), events.LogSubject(n, other, events.LogEvents)) {
			t.Fatalf("LogFilter(%q, %q) matches session %q", ns, sid, other)
		}
	}
	// The runner a record's subject names is the one it was built with,
	// on ACP_IO and on its RePublish.
	io := events.IOSubject(n, s, events.RunnerID(sid))
	if got := events.IORunner(io); got != events.RunnerID(sid) {
		t.Fatalf("IORunner(%q) = %q, want %q", io, got, sid)
	}
	if tail := "acp.iotail." + strings.TrimPrefix(io, "acp.io."); events.IORunner(tail) != events.RunnerID(sid) || !subjectMatches(events.IOTailSubject(n, s), tail) {
		t.Fatalf("IORunner(%q) = %q, or IOTailSubject does not match it", tail, events.IORunner(tail))
	}
	if got, err := events.NamespaceFromAPISubject(events.APISubject(n, events.OpPrompt)); got != n || err != nil {
		t.Fatalf("NamespaceFromAPISubject(APISubject(%q)) = %q, %v; want %q, nil", ns, got, err, ns)
	}
}

// namespaceOracle spells [a-z0-9][a-z0-9_-]{0,62} without a regexp.
func namespaceOracle(s string) bool {
	if len(s) < 1 || len(s) > 63 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// sessionIDOracle spells [A-Za-z0-9_-]{1,128} without a regexp.
func sessionIDOracle(s string) bool {
	if len(s) < 1 || len(s) > 128 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// subjectMatches reports whether the NATS filter (with * and >) matches
// subject.
func subjectMatches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(f) == len(s)
}
