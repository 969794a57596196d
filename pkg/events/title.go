package events

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Session titles. A session's title comes from one of three places, and the
// newest one that is allowed to speak wins:
//
//   - TitleFromMessage: derived from the first user message that has text,
//     when the session has no title yet;
//   - TitleFromAgent: the agent's session_info_update with a string title;
//     it replaces a derived title or an earlier agent title, never a
//     rename;
//   - TitleRenamed: renameSession (RenameSessionRequest.Validate holds it
//     to the rename rules, NormalizeTitle). After a rename the agent no
//     longer changes the title; only another rename does.
//
// Every change is a TitleChanged record on the session's TitleSubject, so
// one direct get (the subject's last message) tells a new owner the title
// and whether it was renamed, without reading the session's history, and
// the title survives the loss of the ACP_SESSIONS projection. This file
// holds the wire format and the rules every title keeps; how a title is
// derived from a message or tidied from an agent's is the session
// service's policy (services/session/titlepolicy.go).

// Title bounds, in runes.
const (
	// MaxTitleRunes bounds a title a client sets (renameSession), and every
	// title Skein stores.
	MaxTitleRunes = 120
)

// Title sources: TitleChanged.Source.
const (
	TitleFromMessage = "message" // derived from the first user message
	TitleFromAgent   = "agent"   // the agent's session_info_update
	TitleRenamed     = "rename"  // renameSession
)

// TitleChanged records that the session's title is now Title, from Source
// (TitleFromMessage, TitleFromAgent, TitleRenamed). It is a control record
// on TitleSubject; the newest one is the title.
type TitleChanged struct {
	Title  string `msgpack:"title"`
	Source string `msgpack:"source"`
}

// RecordTitleChanged is TitleChanged's variant name.
const RecordTitleChanged = "TitleChanged"

// RenameSessionRequest asks OpRenameSession to set a session's title. An
// omitted session ID means main. The schema has no rename: this is Skein's
// own request.
type RenameSessionRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
	Title     string  `msgpack:"title"`
}

// RenameSessionResponse answers OpRenameSession: the session after the
// rename, as getSession shows it.
type RenameSessionResponse struct {
	Session AcpDurableSessionInfo `msgpack:"session"`
}

// Validate checks a renameSession request and returns its session and the
// title to store, normalized (NormalizeTitle); a title that breaks the
// rules is CodeInvalidRequest.
func (r *RenameSessionRequest) Validate() (SessionID, string, error) {
	sid, err := OptionalSessionID(r.SessionID)
	if err != nil {
		return "", "", err
	}
	title, err := NormalizeTitle(r.Title)
	if err != nil {
		return "", "", err
	}
	return sid, title, nil
}

// NormalizeTitle applies the rename rules to a title a client sent: it must
// be valid UTF-8; it is trimmed of surrounding white space; what remains
// must be 1 to MaxTitleRunes runes without control characters (Unicode
// Cc: C0, DEL, C1) or line and paragraph separators (U+2028, U+2029). It
// returns the trimmed title, or CodeInvalidRequest. Inner spaces are kept
// as sent: a title a person typed is theirs.
func NormalizeTitle(title string) (string, error) {
	if !utf8.ValidString(title) {
		return "", Errorf(CodeInvalidRequest, "title must be valid UTF-8")
	}
	title = strings.TrimSpace(title)
	if title == "" {
		return "", Errorf(CodeInvalidRequest, "title must not be empty")
	}
	n := 0
	for _, r := range title {
		if BreaksTitle(r) {
			return "", Errorf(CodeInvalidRequest, "title must not contain control characters (found %U)", r)
		}
		if n++; n > MaxTitleRunes {
			return "", Errorf(CodeInvalidRequest, "title must be at most %d characters", MaxTitleRunes)
		}
	}
	return title, nil
}

// BreaksTitle reports whether r may not appear in a title: a control
// character or a line or paragraph separator. Every title Skein stores,
// however it came, keeps this rule.
func BreaksTitle(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029'
}

func (TitleChanged) VariantName() string          { return RecordTitleChanged }
func (RenameSessionRequest) VariantName() string  { return "RenameSessionRequest" }
func (RenameSessionResponse) VariantName() string { return "RenameSessionResponse" }

func init() {
	register(func() Variant { return new(TitleChanged) })
	register(func() Variant { return new(RenameSessionRequest) })
	register(func() Variant { return new(RenameSessionResponse) })
}
