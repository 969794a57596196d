package session

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"skein.dev/pkg/events"
)

// Title policy: how the session service makes a title of a user message
// or of what an agent sent. Both keep the rules every stored title keeps
// (events.NormalizeTitle accepts them unchanged), so a client can rename
// to any title it has seen.

// derivedTitleRunes bounds a title derived from a user message, before
// the ellipsis that marks it cut.
const derivedTitleRunes = 80

// titleEllipsis marks a title cut to its bound.
const titleEllipsis = "…"

// deriveTitle derives a title from the text of a user message: white space
// collapsed to single spaces and trimmed, control characters, characters
// that hide or reorder text (events.HidesText, but a joiner of two
// pictographs) and invalid UTF-8 dropped, and, when more than
// derivedTitleRunes runes remain, the first derivedTitleRunes followed by
// "…". A text with nothing left is "".
func deriveTitle(text string) string {
	t := newTidier(derivedTitleRunes)
	t.add(text)
	return t.title()
}

// agentTitle tidies a title an agent sent as deriveTitle does, and cuts it
// to events.MaxTitleRunes runes, the last an ellipsis, so that every stored title
// keeps the rename rules. A title with nothing left is "".
func agentTitle(title string) string {
	t := newTidier(events.MaxTitleRunes - 1)
	t.add(title)
	return t.title()
}

// promptTitle derives a title from a user message's content blocks (as
// events.PromptBlocks returns them): the text of its text blocks, one after the
// other with a space between, through deriveTitle. A message without text
// gives "".
func promptTitle(blocks []json.RawMessage) string {
	t := newTidier(derivedTitleRunes)
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
		case r == '\u200d' && !t.space && len(t.out)+1 < t.limit && t.joins(s[i:]):
			// A joiner of two pictographs (👩‍💻), with room for
			// both: the title is never cut between them.
		case events.BreaksTitle(r) || events.HidesText(r):
			continue // neither shown nor stored: it could hide text
		}
		if t.space {
			t.out = append(t.out, ' ')
			t.space = false
		}
		t.out = append(t.out, r)
	}
}

// joins reports whether a zero-width joiner followed by rest joins the
// pictograph last kept to the one rest begins with
// (events.JoinsPictographs).
func (t *tidier) joins(rest string) bool {
	prev := rune(0)
	for j := len(t.out) - 1; j >= 0; j-- {
		if !unicode.Is(unicode.Variation_Selector, t.out[j]) {
			prev = t.out[j]
			break
		}
	}
	next, _ := utf8.DecodeRuneInString(rest)
	return events.JoinsPictographs(prev, next)
}

// title is the text kept, with an ellipsis when it was cut.
func (t *tidier) title() string {
	if !t.full() {
		return string(t.out)
	}
	return strings.TrimRightFunc(string(t.out[:t.limit]), unicode.IsSpace) + titleEllipsis
}
