package events

import (
	"path/filepath"
	"strings"
)

// Discard, fork and folders: Skein's own requests for a client that opens
// sessions eagerly, branches a conversation from its durable log, and picks
// a working directory. The schema has none of them.

// DiscardSessionRequest asks OpDiscardSession to delete a session that was
// opened and never used. An omitted session ID means main.
type DiscardSessionRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
}

// Validate checks a discardSession request: its session.
func (r *DiscardSessionRequest) Validate() (SessionID, error) { return OptionalSessionID(r.SessionID) }

// DiscardSessionResponse answers OpDiscardSession: the session is gone
// (or never existed).
type DiscardSessionResponse struct {
	Reserved bool `msgpack:"reserved"`
}

// ForkSessionRequest asks OpForkSession to make NewSessionID a fork of
// SessionID (omitted: main) at AtSequence (omitted: the source's newest
// record): a new session with the source's agent and options, and a log
// of its own whose first records name the source and the sequence.
type ForkSessionRequest struct {
	SessionID    *string `msgpack:"sessionId,omitempty"`
	NewSessionID string  `msgpack:"newSessionId"`
	AtSequence   *uint64 `msgpack:"atSequence,omitempty"`
}

// Validate checks a forkSession request and returns its source and new
// session; a fork onto its own source is CodeInvalidRequest.
func (r *ForkSessionRequest) Validate() (source, fork SessionID, err error) {
	if source, err = OptionalSessionID(r.SessionID); err != nil {
		return "", "", err
	}
	if r.NewSessionID == "" {
		// ParseSessionID reads "" as main; a fork's new ID is never implied.
		return "", "", Errorf(CodeInvalidSessionID, "newSessionId, the fork's session ID, is required")
	}
	if fork, err = ParseSessionID(r.NewSessionID); err != nil {
		return "", "", err
	}
	if fork == source {
		return "", "", Errorf(CodeInvalidRequest, "a session cannot be forked onto itself")
	}
	if r.AtSequence != nil && *r.AtSequence == 0 {
		return "", "", Errorf(CodeInvalidRequest, "atSequence must be a sequence of the source's log, at least 1")
	}
	return source, fork, nil
}

// ForkSessionResponse answers OpForkSession: the new session, and the
// source's sequence it was forked at (the newest when none was asked).
type ForkSessionResponse struct {
	SessionID       string `msgpack:"sessionId"`
	SourceSessionID string `msgpack:"sourceSessionId"`
	AtSequence      uint64 `msgpack:"atSequence"`
}

// SessionForked is the control record that follows a forked session's
// SessionOpened, in the same atomic append: the session continues the
// source's history up to and including the source's log sequence
// AtSequence. Its first prompt gives the agent that history as the
// continuation preamble of a fallback restore; the source itself is
// never written.
type SessionForked struct {
	SourceSessionID string `msgpack:"sourceSessionId"`
	AtSequence      uint64 `msgpack:"atSequence"`
}

// RecordSessionForked is SessionForked's variant name.
const RecordSessionForked = "SessionForked"

// ListDirectoriesRequest asks OpListDirectories for the folders under Path,
// an absolute path confined to the namespace's workspace as a session's
// cwd is; without Path, for the namespace's own directories under the
// workspace roots and those granted to it.
type ListDirectoriesRequest struct {
	Path *string `msgpack:"path,omitempty"`
}

// MaxDirectoryPathBytes bounds ListDirectoriesRequest.Path.
const MaxDirectoryPathBytes = 4096

// Validate checks a listDirectories request: a path, when given, is
// absolute, clean of NUL and "..", and at most MaxDirectoryPathBytes. Its
// confinement is the runner's to check (package workspace).
func (r *ListDirectoriesRequest) Validate() error {
	if r.Path == nil {
		return nil
	}
	p := *r.Path
	switch {
	case len(p) > MaxDirectoryPathBytes:
		return Errorf(CodeInvalidRequest, "path is %d bytes, more than %d", len(p), MaxDirectoryPathBytes)
	case !filepath.IsAbs(p) || strings.ContainsRune(p, 0):
		return Errorf(CodeInvalidRequest, "path must be an absolute path")
	}
	for e := range strings.SplitSeq(filepath.ToSlash(p), "/") {
		if e == ".." {
			return Errorf(CodeInvalidRequest, "path %q must not contain ..", Truncate(p, 80))
		}
	}
	return nil
}

// DirectoryEntry is one folder of a ListDirectoriesResponse: its name and
// its absolute path, as a session's cwd takes it.
type DirectoryEntry struct {
	Name string `msgpack:"name"`
	Path string `msgpack:"path"`
}

// ListDirectoriesResponse answers OpListDirectories. Path is the folder
// listed ("" for the namespace's roots); Parent the folder above it while
// that is still in the namespace's workspace ("" at its top, and for the
// roots); Directories its folders, by name, at most MaxDirectoryEntries
// (Truncated says some were left out). Files are never listed, nor are
// symlinks, nor anything of a file's contents.
type ListDirectoriesResponse struct {
	Path        string           `msgpack:"path"`
	Parent      string           `msgpack:"parent,omitempty"`
	Directories []DirectoryEntry `msgpack:"directories"`
	Truncated   bool             `msgpack:"truncated,omitempty"`
}

// MaxDirectoryEntries bounds the folders one ListDirectoriesResponse holds.
const MaxDirectoryEntries = 10000

func (DiscardSessionRequest) VariantName() string   { return "DiscardSessionRequest" }
func (DiscardSessionResponse) VariantName() string  { return "DiscardSessionResponse" }
func (ForkSessionRequest) VariantName() string      { return "ForkSessionRequest" }
func (ForkSessionResponse) VariantName() string     { return "ForkSessionResponse" }
func (SessionForked) VariantName() string           { return RecordSessionForked }
func (ListDirectoriesRequest) VariantName() string  { return "ListDirectoriesRequest" }
func (ListDirectoriesResponse) VariantName() string { return "ListDirectoriesResponse" }

func init() {
	register(func() Variant { return new(DiscardSessionRequest) })
	register(func() Variant { return new(DiscardSessionResponse) })
	register(func() Variant { return new(ForkSessionRequest) })
	register(func() Variant { return new(ForkSessionResponse) })
	register(func() Variant { return new(SessionForked) })
	register(func() Variant { return new(ListDirectoriesRequest) })
	register(func() Variant { return new(ListDirectoriesResponse) })
}
