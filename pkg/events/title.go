package events

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Session titles: from the first user message with text
// (TitleFromMessage), the agent's session_info_update (TitleFromAgent,
// never over a rename) or renameSession (TitleRenamed, NormalizeTitle's
// rules). Each change is a TitleChanged on TitleSubject, whose last message
// is the title; deriving and tidying titles is the session service's
// policy (services/session/titlepolicy.go).

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
	// Budget, when set, replaces the session's cap (budget.go); the title
	// may then be "" for none. Both change in one append, or neither.
	Budget *Budget `msgpack:"budget,omitempty"`
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
	if r.Budget != nil {
		if err := r.Budget.Validate(); err != nil {
			return "", "", err
		}
		if r.Title == "" {
			return sid, "", nil
		}
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
// Cc: C0, DEL, C1), line and paragraph separators (U+2028, U+2029) or
// characters that hide or reorder text (HiddenRune). It returns the
// trimmed title, or CodeInvalidRequest. Inner spaces are kept as sent: a
// title a person typed is theirs.
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
	if r, ok := HiddenRune(title); ok {
		return "", Errorf(CodeInvalidRequest, "title must not contain characters that hide or reorder text (found %U)", r)
	}
	return title, nil
}

// BreaksTitle reports whether r may not appear in a title: a control
// character or a line or paragraph separator. Every title Skein stores,
// however it came, keeps this rule, and HiddenRune finds none in it.
func BreaksTitle(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029'
}

// Names and titles are shown to people, who must see what they are given.
// A character that shows nothing, or that reorders the text around it,
// makes a name read as another ("invoice\u202Efdp.exe" shows as
// "invoiceexe.pdf"; "ad\u200Bmin" as "admin"). Such characters are
// refused where a person sets the name (an upload, a rename) and dropped
// where an agent does (its titles): HiddenRune and HidesText say which.

// zeroWidthJoiner joins two pictographs into one (👩 ZWJ 💻 is 👩‍💻), and
// elsewhere hides in a word.
const zeroWidthJoiner = '\u200d'

// HidesText reports whether r, shown, hides or reorders text: a format
// character (Unicode Cf: the bidirectional controls U+061C, U+200E,
// U+200F, U+202A-U+202E and U+2066-U+2069, the zero-width space, non-joiner
// and joiner U+200B-U+200D, the word joiner U+2060, the byte order mark
// U+FEFF, the soft hyphen, the tag characters), and the other code points
// Unicode says to show as nothing (Other_Default_Ignorable_Code_Point:
// the Hangul fillers among them). A zero-width joiner between two
// pictographs hides nothing: HiddenRune allows it there.
func HidesText(r rune) bool {
	return unicode.In(r, unicode.Cf, unicode.Bidi_Control, unicode.Other_Default_Ignorable_Code_Point)
}

// HiddenRune returns the first rune of s that HidesText, but a zero-width
// joiner that joins two pictographs (JoinsPictographs), and whether there
// is one.
func HiddenRune(s string) (rune, bool) {
	var prev rune // the last rune, but variation selectors
	for i, r := range s {
		if r == zeroWidthJoiner {
			next, _ := utf8.DecodeRuneInString(s[i+utf8.RuneLen(r):])
			if JoinsPictographs(prev, next) {
				prev = r
				continue
			}
		}
		if HidesText(r) {
			return r, true
		}
		if !unicode.Is(unicode.Variation_Selector, r) {
			prev = r
		}
	}
	return 0, false
}

// JoinsPictographs reports whether a zero-width joiner between prev (the
// rune before it, but variation selectors) and next joins two pictographs:
// prev a symbol (Unicode So) or a skin tone modifier (Sk), next a symbol,
// neither ASCII nor the replacement character (which stands for invalid
// UTF-8, or for nothing at the end of a string).
func JoinsPictographs(prev, next rune) bool {
	pictograph := func(r rune) bool { return r > unicode.MaxASCII && r != utf8.RuneError }
	return pictograph(prev) && pictograph(next) && unicode.In(prev, unicode.So, unicode.Sk) && unicode.Is(unicode.So, next)
}

func (TitleChanged) VariantName() string          { return RecordTitleChanged }
func (RenameSessionRequest) VariantName() string  { return "RenameSessionRequest" }
func (RenameSessionResponse) VariantName() string { return "RenameSessionResponse" }

func init() {
	register(func() Variant { return new(TitleChanged) })
	register(func() Variant { return new(RenameSessionRequest) })
	register(func() Variant { return new(RenameSessionResponse) })
}
