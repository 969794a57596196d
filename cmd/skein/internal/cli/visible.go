package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"skein.dev/pkg/events"
)

// What the CLI prints of an agent's or a tenant's making (message text,
// tool titles and output, file and folder names, titles, errors) reaches a
// terminal, which would act on the control characters in it: an escape
// sequence can move the cursor and rewrite what was printed, set the
// window's title, write a hyperlink that shows one address and opens
// another (OSC 8), or, in some terminals, answer back into the input; a
// carriage return or a backspace overwrites a line. So the CLI prints such
// strings as gh does (go-gh's asciisanitizer): every C0 control but tab
// and newline, DEL, and every C1 control in caret notation (ESC is ^[, a
// carriage return ^M, backspace ^H, the C1 CSI ^[ as gh has it), so that
// the sequence shows, inert, instead of acting. Unlike gh, a carriage
// return shows too, unless a newline follows it (a Windows line end, which
// overwrites nothing): gh keeps it, and with it the line an agent rewrites.
// Characters that hide or reorder text (events.HidesText: the bidi
// overrides, zero-width characters) show as <U+202E>, but a joiner of two
// pictographs. Invalid UTF-8 shows as U+FFFD.
//
// JSON output keeps its values: visibleJSON escapes those characters as
// \uXXXX, which decode to the same string.

// Visible returns s as the CLI prints it (see above).
func Visible(s string) string {
	if !needsVisible(s) {
		return s
	}
	var b strings.Builder
	visibleTo(&b, s, 0)
	return b.String()
}

// visibleTo writes s made Visible to b, after prev, the last rune written
// before it but variation selectors (0: none), which a joiner at the start
// of s needs. It returns the same of s, for what comes next.
func visibleTo(b *strings.Builder, s string, prev rune) rune {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		next := s[i+size:]
		i += size
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteRune(utf8.RuneError)
		case r == '\r' && strings.HasPrefix(next, "\n"):
			// A Windows line end: the newline follows.
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			b.WriteString(caret(r))
		case r >= 0x80 && r < 0xa0:
			b.WriteString(caret(r - 0x80))
		case r == '\u200d' && events.JoinsPictographs(prev, firstRune(next)):
			b.WriteRune(r)
		case events.HidesText(r):
			fmt.Fprintf(b, "<%U>", r)
		default:
			b.WriteRune(r)
		}
		if r < 0xfe00 || r > 0xfe0f {
			prev = r
		}
	}
	return prev
}

// needsVisible reports whether Visible would change s: most strings are
// printable as they are, and are not copied.
func needsVisible(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == '\n' || r == '\t':
		case r == utf8.RuneError && size == 1, r < 0x20, r >= 0x7f && r < 0xa0, events.HidesText(r):
			return true
		}
	}
	return false
}

// caret returns the caret notation of C0 control r (or DEL): ^@ to ^_,
// and ^?.
func caret(r rune) string {
	if r == 0x7f {
		return "^?"
	}
	return "^" + string(rune('@'+r))
}

func firstRune(s string) rune {
	r, _ := utf8.DecodeRuneInString(s)
	return r
}

// visibleJSON returns the JSON document raw with every control character
// and every character that hides text (events.HidesText) in it escaped as
// \uXXXX: the same values, printable. Outside strings JSON holds only
// ASCII punctuation and white space, so the runes replaced are all inside
// strings. Invalid UTF-8 becomes \ufffd, as a decoder reads it.
func visibleJSON(raw []byte) []byte {
	clean := true
	for i := 0; i < len(raw); {
		r, size := utf8.DecodeRune(raw[i:])
		i += size
		if (r == utf8.RuneError && size == 1) || r == 0x7f || (r >= 0x80 && r < 0xa0) || events.HidesText(r) || (r < 0x20 && r != '\n' && r != '\t' && r != '\r' && r != ' ') {
			clean = false
			break
		}
	}
	if clean {
		return raw
	}
	var b bytes.Buffer
	for i := 0; i < len(raw); {
		r, size := utf8.DecodeRune(raw[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\ufffd`)
		case r == 0x7f || (r >= 0x80 && r < 0xa0) || events.HidesText(r) || (r < 0x20 && r != '\n' && r != '\t' && r != '\r' && r != ' '):
			if r > 0xffff {
				r1, r2 := utf16Pair(r)
				fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.Write(raw[i : i+size])
		}
		i += size
	}
	return b.Bytes()
}

// utf16Pair returns the surrogate pair of r, above U+FFFF.
func utf16Pair(r rune) (rune, rune) {
	r -= 0x10000
	return 0xd800 + (r>>10)&0x3ff, 0xdc00 + r&0x3ff
}

// decodeVisible decodes JSON (an event's, a state change's) into v with
// every string in it, at any depth (an event's raw content, tool input
// and output, options among them), made Visible: whatever the printer
// shows of it is inert.
func decodeVisible(raw []byte, v any) error {
	visible, err := visibleStrings(raw)
	if err != nil {
		return err
	}
	return json.Unmarshal(visible, v)
}

// visibleStrings returns the JSON document raw with every string in it,
// keys too, made Visible.
func visibleStrings(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(visibleValue(v)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func visibleValue(v any) any {
	switch v := v.(type) {
	case string:
		return Visible(v)
	case []any:
		for i := range v {
			v[i] = visibleValue(v[i])
		}
		return v
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[Visible(k)] = visibleValue(x)
		}
		return out
	}
	return v
}

// visibleWriter writes what it is given to w made Visible, as it comes: a
// rune, a carriage return or a joiner cut between two writes waits for
// the next (or for Close), so that the pieces show as the whole would.
type visibleWriter struct {
	w       io.Writer
	pending []byte
	prev    rune // the last rune written but variation selectors (visibleTo)
}

func (v *visibleWriter) Write(p []byte) (int, error) {
	buf := append(v.pending, p...)
	// Hold back an incomplete rune at the end, and a carriage return
	// whose newline may come next.
	keep := 0
	for k := 1; k <= utf8.UTFMax-1 && k <= len(buf); k++ {
		if utf8.RuneStart(buf[len(buf)-k]) {
			if !utf8.FullRune(buf[len(buf)-k:]) {
				keep = k
			}
			break
		}
	}
	if keep == 0 && len(buf) > 0 && buf[len(buf)-1] == '\r' {
		keep = 1
	}
	if bytes.HasSuffix(buf[:len(buf)-keep], []byte("\u200d")) {
		keep += len("\u200d") // it needs the rune after it
	}
	out := buf[:len(buf)-keep]
	v.pending = append([]byte(nil), buf[len(buf)-keep:]...)
	if err := v.write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (v *visibleWriter) write(p []byte) error {
	var b strings.Builder
	v.prev = visibleTo(&b, string(p), v.prev)
	_, err := io.WriteString(v.w, b.String())
	return err
}

// Close writes what was held back.
func (v *visibleWriter) Close() error {
	if len(v.pending) == 0 {
		return nil
	}
	err := v.write(v.pending)
	v.pending = nil
	return err
}
