package acp

import (
	"bytes"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// This file reads values that were validated already. The adapter-runner
// reads every line an agent writes twice: acpwire.Parse validates the
// line and hands out its params, and a session/update's routing members
// are then read from those params. jsontext validates as it reads, so
// the second reading paid for a validation the first had done, on
// payloads that are mostly one long chunk of text. LookupValid skims
// instead: it finds the ends of strings with bytes.IndexByte and checks
// nothing that validation settled.

// LookupValid is Lookup for obj that is known to be valid JSON: a value
// that Lookup, Member or Elements handed out from input they read in
// full, for example. It stores the same values and refuses the same
// repeated names as Lookup, and reports ErrMalformed when obj is valid
// JSON of another type than an object. It does not check obj otherwise:
// on input that is not valid JSON it does not panic and hands out only
// sub-slices of obj, but what it finds then is unspecified.
func LookupValid(obj []byte, fields ...Field) error {
	clearFields(fields)
	s := skim{b: obj}
	s.space()
	if s.peek() != '{' {
		return malformed("a JSON %s, not an object", kindName(jsontext.Value(s.b[min(s.i, len(s.b)):]).Kind()))
	}
	s.i++
	var repeated error
	s.members(fields, &repeated)
	return repeated
}

// skim reads valid JSON without checking it. Every read is bounded by
// len(b): on input that is not valid JSON it stops at the end, never
// past it.
type skim struct {
	b []byte
	i int
}

// peek returns the byte at the cursor, or 0 at the end.
func (s *skim) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// space skips JSON whitespace.
func (s *skim) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// members reads the members of the object whose '{' was just read,
// through its '}', as lookupMembers does.
func (s *skim) members(fields []Field, repeated *error) {
	for {
		s.space()
		if c := s.peek(); c == '}' || c == 0 {
			s.i++
			return
		}
		keyStart := s.i
		s.str()
		key := Key(s.b[keyStart:min(s.i, len(s.b))])
		s.space()
		s.i++ // ':'
		s.space()
		f := (*Field)(nil)
		if len(key) >= 2 {
			f = matchField(fields, key)
		}
		start := s.i
		if f != nil && f.Fields != nil && *f.Value == nil && s.peek() == '{' {
			s.i++
			s.members(f.Fields, repeated)
		} else {
			s.value()
		}
		end := min(s.i, len(s.b))
		start = min(start, end)
		s.space()
		if s.peek() == ',' {
			s.i++
		}
		if f == nil {
			continue
		}
		if *f.Value != nil {
			if *repeated == nil {
				// strconv.Quote copies the name: passing f.Name on would
				// make every field's Value escape, and each caller's
				// variables with them.
				*repeated = malformed("member %s appears twice", strconv.Quote(f.Name))
			}
			continue
		}
		*f.Value = s.b[start:end:end]
	}
}

// value skips one value.
func (s *skim) value() {
	switch s.peek() {
	case '"':
		s.str()
	case '{', '[':
		s.nested()
	default:
		// A number or a literal: up to the next delimiter.
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return
			}
			s.i++
		}
	}
}

// str skips the string that starts at the cursor, quotes included.
func (s *skim) str() {
	s.i++ // the opening quote
	for {
		n := bytes.IndexByte(s.b[min(s.i, len(s.b)):], '"')
		if n < 0 {
			s.i = len(s.b)
			return
		}
		s.i += n + 1
		// The quote ends the string unless an odd number of
		// backslashes escape it.
		k := 0
		for j := s.i - 2; j >= 0 && s.b[j] == '\\'; j-- {
			k++
		}
		if k%2 == 0 {
			return
		}
	}
}

// nested skips the object or array that starts at the cursor.
func (s *skim) nested() {
	depth := 0
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			s.str()
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				s.i++
				return
			}
		}
		s.i++
	}
}
