package events

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Session titles. A session's title comes from one of three places, and the
// newest one that is allowed to speak wins:
//
//   - TitleFromMessage: derived from the first user message that has text,
//     when the session has no title yet (DeriveTitle);
//   - TitleFromAgent: the agent's session_info_update with a string title
//     (AgentTitle tidies it); it replaces a derived title or an earlier
//     agent title, never a rename;
//   - TitleRenamed: renameSession (RenameSessionRequest.Validate holds it
//     to the rename rules, NormalizeTitle). After a rename the agent no
//     longer changes the title; only another rename does.
//
// Every change is a TitleChanged record on the session's TitleSubject, so
// one direct get (the subject's last message) tells a new owner the title
// and whether it was renamed, without reading the session's history, and
// the title survives the loss of the ACP_SESSIONS projection.

// Title bounds, in runes.
const (
	// MaxTitleRunes bounds a title a client sets (renameSession), and every
	// title Skein stores.
	MaxTitleRunes = 120
	// DerivedTitleRunes bounds a title derived from a user message, before
	// the ellipsis that marks it cut.
	DerivedTitleRunes = 80
)

// Title sources: TitleChanged.Source.
const (
	TitleFromMessage = "message" // derived from the first user message
	TitleFromAgent   = "agent"   // the agent's session_info_update
	TitleRenamed     = "rename"  // renameSession
)

// titleEllipsis marks a title cut to its bound.
const titleEllipsis = "…"

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
		if breaksLine(r) {
			return "", Errorf(CodeInvalidRequest, "title must not contain control characters (found %U)", r)
		}
		if n++; n > MaxTitleRunes {
			return "", Errorf(CodeInvalidRequest, "title must be at most %d characters", MaxTitleRunes)
		}
	}
	return title, nil
}

// breaksLine reports whether r may not appear in a title: a control
// character or a line or paragraph separator.
func breaksLine(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029'
}

// DeriveTitle derives a title from the text of a user message: white space
// collapsed to single spaces and trimmed, control characters and invalid
// UTF-8 dropped, and, when more than DerivedTitleRunes runes remain, the
// first DerivedTitleRunes followed by "…". A text with nothing left is "".
func DeriveTitle(text string) string {
	t := newTidier(DerivedTitleRunes)
	t.add(text)
	return t.title()
}

// AgentTitle tidies a title an agent sent as DeriveTitle does, and cuts it
// to MaxTitleRunes runes, the last an ellipsis, so that every stored title
// keeps the rename rules. A title with nothing left is "".
func AgentTitle(title string) string {
	t := newTidier(MaxTitleRunes - 1)
	t.add(title)
	return t.title()
}

// PromptTitle derives a title from a user message's content blocks (as
// PromptBlocks returns them): the text of its text blocks, one after the
// other with a space between, through DeriveTitle. A message without text
// gives "".
func PromptTitle(blocks []json.RawMessage) string {
	t := newTidier(DerivedTitleRunes)
	for _, b := range blocks {
		if t.full() {
			break
		}
		var block struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(b, &block) != nil || block.Type != "text" {
			continue
		}
		t.add(block.Text)
		t.add(" ")
	}
	return t.title()
}

// tidier collapses white space in the text it is given, drops what may not
// be in a title, and keeps at most limit runes and one more, to know the
// title was cut. It stops reading once it holds that many, so a prompt of
// megabytes costs no more than its first few hundred bytes.
type tidier struct {
	out   []rune
	limit int
	space bool // white space seen since the last rune kept
}

func newTidier(limit int) *tidier { return &tidier{out: make([]rune, 0, limit+1), limit: limit} }

// full reports whether more text would change nothing.
func (t *tidier) full() bool { return len(t.out) > t.limit }

func (t *tidier) add(s string) {
	for i := 0; i < len(s) && !t.full(); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == utf8.RuneError && size == 1:
			continue // not UTF-8
		case unicode.IsSpace(r):
			t.space = len(t.out) > 0
			continue
		case breaksLine(r):
			continue
		}
		if t.space {
			t.out = append(t.out, ' ')
			t.space = false
		}
		t.out = append(t.out, r)
	}
}

// title is the text kept, with an ellipsis when it was cut.
func (t *tidier) title() string {
	if !t.full() {
		return string(t.out)
	}
	return strings.TrimRightFunc(string(t.out[:t.limit]), unicode.IsSpace) + titleEllipsis
}

func (TitleChanged) VariantName() string          { return RecordTitleChanged }
func (RenameSessionRequest) VariantName() string  { return "RenameSessionRequest" }
func (RenameSessionResponse) VariantName() string { return "RenameSessionResponse" }

func init() {
	register(func() Variant { return new(TitleChanged) })
	register(func() Variant { return new(RenameSessionRequest) })
	register(func() Variant { return new(RenameSessionResponse) })
}
