package events

import (
	"regexp"
	"unicode/utf8"
)

// Namespace is a tenant. Every name on NATS is scoped by it. Valid values
// match [a-z0-9][a-z0-9_-]{0,62}, so a valid Namespace is always exactly one
// subject token.
type Namespace string

// SessionID is the public, caller-owned identity of a session. Valid values
// match [A-Za-z0-9_-]{1,128}: never a '.', '*', '>' or white space, so a
// valid SessionID is always exactly one subject token. It is never escaped.
type SessionID string

// RunnerID names one adapter-runner instance. Same alphabet as SessionID.
type RunnerID string

// Defaults applied where a request omits the value.
const (
	DefaultNamespace Namespace = "default"
	DefaultSessionID SessionID = "main"
)

var (
	namespaceRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	tokenRE     = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
)

// Valid reports whether ns may be used as a subject token.
func (ns Namespace) Valid() bool { return namespaceRE.MatchString(string(ns)) }

// Valid reports whether id may be used as a subject token.
func (id SessionID) Valid() bool { return tokenRE.MatchString(string(id)) }

// Valid reports whether id may be used as a subject token.
func (id RunnerID) Valid() bool { return tokenRE.MatchString(string(id)) }

// ParseNamespace validates s. The empty string is DefaultNamespace.
func ParseNamespace(s string) (Namespace, error) {
	if s == "" {
		return DefaultNamespace, nil
	}
	ns := Namespace(s)
	if !ns.Valid() {
		return "", Errorf(CodeInvalidNamespace, "namespace %q must match [a-z0-9][a-z0-9_-]{0,62}", Truncate(s, 80))
	}
	return ns, nil
}

// ParseSessionID validates s. The empty string is DefaultSessionID, as the
// protocol says of every omitted session ID.
func ParseSessionID(s string) (SessionID, error) {
	if s == "" {
		return DefaultSessionID, nil
	}
	id := SessionID(s)
	if !id.Valid() {
		return "", Errorf(CodeInvalidSessionID, "session ID %q must match [A-Za-z0-9_-]{1,128}", Truncate(s, 80))
	}
	return id, nil
}

// OptionalSessionID is ParseSessionID for a protocol field of type
// optional<str>.
func OptionalSessionID(s *string) (SessionID, error) {
	if s == nil {
		return DefaultSessionID, nil
	}
	if *s == "" {
		return "", Errorf(CodeInvalidSessionID, "session ID must not be empty")
	}
	return ParseSessionID(*s)
}

// Truncate returns s, or its first n bytes and "…" when it is longer, cut
// at a rune boundary: what an error message may repeat of a caller's input.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
