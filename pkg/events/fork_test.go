package events_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"skein.dev/pkg/events"
)

func TestForkSessionRequestValidate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		req       events.ForkSessionRequest
		src, fork events.SessionID
		want      events.Code
	}{
		{"defaults", events.ForkSessionRequest{NewSessionID: "b"}, "main", "b", ""},
		{"at a sequence", events.ForkSessionRequest{SessionID: new("a"), NewSessionID: "b", AtSequence: new(uint64(7))}, "a", "b", ""},
		{"zero", events.ForkSessionRequest{SessionID: new("a"), NewSessionID: "b", AtSequence: new(uint64(0))}, "", "", events.CodeInvalidRequest},
		{"onto itself", events.ForkSessionRequest{SessionID: new("a"), NewSessionID: "a"}, "", "", events.CodeInvalidRequest},
		{"onto main by default", events.ForkSessionRequest{NewSessionID: "main"}, "", "", events.CodeInvalidRequest},
		{"no new ID", events.ForkSessionRequest{SessionID: new("a")}, "", "", events.CodeInvalidSessionID},
		{"bad new ID", events.ForkSessionRequest{SessionID: new("a"), NewSessionID: "a.b"}, "", "", events.CodeInvalidSessionID},
		{"bad source", events.ForkSessionRequest{SessionID: new("a>"), NewSessionID: "b"}, "", "", events.CodeInvalidSessionID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, fork, err := tc.req.Validate()
			if got := code(err); got != tc.want || src != tc.src || fork != tc.fork {
				t.Errorf("Validate() = %q, %q, %v; want %q, %q, %q", src, fork, err, tc.src, tc.fork, tc.want)
			}
		})
	}
}

func code(err error) events.Code {
	if err == nil {
		return ""
	}
	return events.AsError(err).Code
}

// FuzzForkSessionRequest: an accepted fork names two valid, distinct
// sessions and no sequence 0; a refusal is a typed error.
func FuzzForkSessionRequest(f *testing.F) {
	f.Add("a", "b", uint64(1), true)
	f.Add("", "main", uint64(0), false)
	f.Add("a", "a", uint64(3), true)
	f.Add("a.b", "c*", uint64(0), true)
	f.Fuzz(func(t *testing.T, src, fork string, at uint64, hasAt bool) {
		req := events.ForkSessionRequest{NewSessionID: fork}
		if src != "" {
			req.SessionID = &src
		}
		if hasAt {
			req.AtSequence = &at
		}
		s, n, err := req.Validate()
		if err != nil {
			if !events.AsError(err).Code.Known() {
				t.Fatalf("Validate(%q, %q) = %v: not a registry code", src, fork, err)
			}
			return
		}
		if !s.Valid() || !n.Valid() || s == n || (hasAt && at == 0) {
			t.Fatalf("Validate(%q, %q, %d) accepted %q → %q", src, fork, at, s, n)
		}
	})
}

// FuzzListDirectoriesRequest: an accepted path is absolute, bounded, and
// holds neither NUL nor a ".." element, so that the runner's confinement
// check starts from a path it can reason about.
func FuzzListDirectoriesRequest(f *testing.F) {
	for _, seed := range []string{"/", "/ws/default", "relative", "/a/../b", "/a/..", "/a/..b", "/a\x00b", "", strings.Repeat("/a", 3000)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		req := events.ListDirectoriesRequest{Path: &p}
		if err := req.Validate(); err != nil {
			if events.AsError(err).Code != events.CodeInvalidRequest {
				t.Fatalf("Validate(%q) = %v, want invalid_request", p, err)
			}
			return
		}
		if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) || len(p) > events.MaxDirectoryPathBytes ||
			slices.Contains(strings.Split(filepath.ToSlash(p), "/"), "..") {
			t.Fatalf("Validate accepted %q", p)
		}
	})
}
