package acp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// This file is Skein's one byte-preserving reader of JSON objects: every
// service that reads or edits a member of an ACP payload without
// re-encoding the rest goes through it, and so does pkg/acp/acpwire's reading
// of JSON-RPC envelopes.
//
// # Why it exists
//
// ACP payloads are stored and shown exactly as the agent wrote them
// (unknown fields, _meta, number spellings, key order and whitespace
// included): a round trip through encoding/json would lose all of that,
// and a map would also reorder the members. So a payload is never decoded
// as a whole; these functions locate members in the raw bytes and hand
// out, or splice, sub-slices of them.
//
// # Contracts
//
//   - Validity is encoding/json's: an input is accepted exactly when
//     json.Valid accepts it (invalid UTF-8 in strings and repeated member
//     names are allowed, as there) and it is one object. Nothing else is
//     checked: unknown members and values are the normal case.
//   - A member that a reader looks for by name (Lookup, Member, and the
//     parsers built on them) must not repeat: decoders disagree on which
//     of two values counts. Lookup still reads the rest, so input that is
//     not JSON is always reported as such.
//   - Raw values are sub-slices of the input, without surrounding
//     whitespace, capped (appending to one cannot overwrite the input).
//     They are read-only views: copy one to keep it past a change of the
//     input.
//   - Names are compared after JSON unescaping, with encoding/json's
//     reading of invalid UTF-8 (U+FFFD), so "\u0069d" names member id.
//   - Edits (WithoutMember, WithMember) copy every byte they do not
//     change: the members kept, their order, their whitespace.
//
// # Why jsontext
//
// The tokenizer is github.com/go-json-experiment/json/jsontext, the
// encoding/json/v2 tokenizer (in the standard library behind
// GOEXPERIMENT=jsonv2 since Go 1.25). It validates and locates in one
// pass, reports offsets into the input, and is fuzzed upstream; a
// hand-written scanner needed a json.Valid pass first and its own bounds
// reasoning, and Skein had grown three of them.

// Key is the name of an object member exactly as written: a JSON string,
// quotes and escapes included, a sub-slice of the object. Use Is to
// compare it and Name to decode it; copy the bytes (they are the
// payload's) to preserve the spelling.
type Key []byte

// Name returns the member's name as encoding/json decodes it: escapes
// resolved, invalid UTF-8 and lone surrogates read as U+FFFD. Names
// without escapes, nearly all of them, cost one string conversion.
func (k Key) Name() string {
	inner, ok := k.plain()
	if ok {
		return string(inner)
	}
	return unquote(k)
}

// Is reports whether the member's name is name, after unescaping. It does
// not allocate for names without escapes.
func (k Key) Is(name string) bool {
	inner, ok := k.plain()
	if ok {
		return string(inner) == name
	}
	return unquote(k) == name
}

// NameBytes is Name as bytes. For a name without escapes, nearly all of
// them, it is the bytes between the quotes, not a copy: read-only, and
// free to compare or look up (string(b) == s and m[string(b)] do not
// allocate).
func (k Key) NameBytes() []byte {
	inner, ok := k.plain()
	if ok {
		return inner
	}
	return []byte(unquote(k))
}

// plain returns the bytes between the quotes when they are the name
// itself: no escapes and valid UTF-8.
func (k Key) plain() ([]byte, bool) {
	if len(k) < 2 {
		return nil, false
	}
	inner := k[1 : len(k)-1]
	return inner, bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner)
}

// Members calls fn for each member of the JSON object obj, in document
// order, with the member's key (as written) and its raw value. Leading and
// trailing whitespace around obj is allowed.
//
// When obj is not valid JSON, or valid JSON but not an object, Members
// returns an error wrapping ErrMalformed. It reads obj as it goes, so fn
// may already have been called for the members before the fault: a caller
// that collects must drop what it collected on error. When fn returns an
// error, Members stops and returns that error unchanged; the rest of obj
// is then not checked.
func Members(obj []byte, fn func(key Key, value []byte) error) error {
	_, _, err := walk(obj, func(m member) error {
		return fn(Key(obj[m.keyStart:m.keyEnd:m.keyEnd]), obj[m.valStart:m.valEnd:m.valEnd])
	})
	return err
}

// Member returns the raw value of the member name of the JSON object obj:
// a sub-slice of obj, or ok false when there is no such member. It fails
// (ErrMalformed) when obj is not a valid JSON object, or when name appears
// more than once: RFC 8259 leaves the meaning of a repeated name open
// (encoding/json takes the last, other readers the first), and a value
// that different readers read differently must not route anything.
func Member(obj []byte, name string) (value []byte, ok bool, err error) {
	if err := Lookup(obj, Field{Name: name, Value: &value}); err != nil {
		return nil, false, err
	}
	return value, value != nil, nil
}

// Elements calls fn for each element of the JSON array arr, in order,
// with its raw value (a capped sub-slice of arr). Errors are as for
// Members: ErrMalformed when arr is not a valid JSON array, possibly
// after some calls; fn's own error unchanged.
func Elements(arr []byte, fn func(value []byte) error) error {
	s := getScanner(arr)
	defer s.release()
	d := &s.dec
	if err := s.open('['); err != nil {
		return err
	}
	for d.PeekKind() != ']' {
		v, err := d.ReadValue()
		if err != nil {
			return syntaxError(err)
		}
		end := int(d.InputOffset())
		if err := fn(arr[end-len(v) : end : end]); err != nil {
			return err
		}
	}
	_, err := s.close()
	return err
}

// WithoutMember returns obj without its members named name (every one of
// them, if the name repeats), and every other byte as it was: the members
// kept, their order and the whitespace between them. The comma that
// separated a removed member goes with it, so the result is a valid JSON
// object whenever obj is one. When obj is not a valid JSON object, or has
// no such member, WithoutMember returns obj itself; otherwise a new slice.
func WithoutMember(obj []byte, name string) []byte {
	var (
		out       []byte
		copied    int  // obj[:copied] is in out, or dropped
		runStart  = -1 // key start of the first removed member since the last kept one
		lastKept  = -1 // value end of the last member kept
		lastValue int  // value end of the last member
	)
	_, _, err := walk(obj, func(m member) error {
		lastValue = m.valEnd
		if Key(obj[m.keyStart:m.keyEnd]).Is(name) {
			if runStart < 0 {
				runStart = m.keyStart
			}
			return nil
		}
		if runStart >= 0 {
			// Drop the run up to this member's key: the removed members
			// and the commas after each.
			if out == nil {
				out = make([]byte, 0, len(obj))
			}
			out = append(out, obj[copied:runStart]...)
			copied, runStart = m.keyStart, -1
		}
		lastKept = m.valEnd
		return nil
	})
	if err != nil || (runStart < 0 && out == nil) {
		return obj
	}
	if runStart >= 0 {
		// The object ends with removed members: drop from the end of the
		// last kept value (its comma goes too), or from the first removed
		// key when none is kept.
		cut := runStart
		if lastKept >= 0 {
			cut = lastKept
		}
		if out == nil {
			out = make([]byte, 0, len(obj))
		}
		out = append(out, obj[copied:cut]...)
		copied = lastValue
	}
	return append(out, obj[copied:]...)
}

// WithMember returns obj with the value of its member name replaced by
// value, or, when obj has no such member, with "name":value added after
// its last member. Every other byte is kept as it was. If the name
// repeats, every occurrence gets value. value must be one valid JSON value
// and is copied verbatim (no newline check: compact it first if the result
// goes on a JSON-RPC line). When obj is not a valid JSON object, or value
// is not valid JSON, WithMember returns obj itself; otherwise a new slice.
func WithMember(obj []byte, name string, value []byte) []byte {
	if !json.Valid(value) {
		return obj
	}
	var (
		out     []byte
		copied  int
		found   bool
		lastEnd = -1 // value end of the last member
	)
	open, _, err := walk(obj, func(m member) error {
		lastEnd = m.valEnd
		if !Key(obj[m.keyStart:m.keyEnd]).Is(name) {
			return nil
		}
		if out == nil {
			out = make([]byte, 0, len(obj)+len(value))
		}
		out = append(out, obj[copied:m.valStart]...)
		out = append(out, value...)
		copied, found = m.valEnd, true
		return nil
	})
	if err != nil {
		return obj
	}
	if !found {
		at := open + 1 // just after '{' when the object is empty
		if lastEnd >= 0 {
			at = lastEnd
		}
		out = make([]byte, 0, len(obj)+len(name)+len(value)+4)
		out = append(out, obj[:at]...)
		if lastEnd >= 0 {
			out = append(out, ',')
		}
		out = appendQuoted(out, name)
		out = append(out, ':')
		out = append(out, value...)
		copied = at
	}
	return append(out, obj[copied:]...)
}

// appendQuoted appends name as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as encoding/json would write it.
func appendQuoted(b []byte, name string) []byte {
	b, _ = jsontext.AppendQuote(b, name) // the error only reports invalid UTF-8, already replaced
	return b
}

// unquote decodes the raw JSON string s as encoding/json does (invalid
// UTF-8 and lone surrogates read as U+FFFD). s must be a valid JSON string.
func unquote(s []byte) string {
	v, _ := StringValue(s)
	return v
}

// StringValue returns the value of the raw JSON value v (as Lookup or
// Member hand it out) when it is a string, decoded as Key.Name decodes a
// name; ok is false for any other value, or for none.
func StringValue(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	if inner := v[1 : len(v)-1]; bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), true
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false
	}
	return s, true
}

// member is where one member of an object lies in it.
type member struct {
	keyStart, keyEnd int // the key, quotes included
	valStart, valEnd int // the value, without surrounding whitespace
}

// walk reads the JSON object obj and calls fn with each member's
// position, in order. It returns the offsets of the object's braces.
func walk(obj []byte, fn func(member) error) (open, end int, err error) {
	s := getScanner(obj)
	defer s.release()
	d := &s.dec
	if err := s.open('{'); err != nil {
		return 0, 0, err
	}
	open = int(d.InputOffset()) - 1
	for d.PeekKind() != '}' {
		k, err := d.ReadValue()
		if err != nil {
			return 0, 0, syntaxError(err)
		}
		m := member{keyEnd: int(d.InputOffset())}
		m.keyStart = m.keyEnd - len(k)
		v, err := d.ReadValue()
		if err != nil {
			return 0, 0, syntaxError(err)
		}
		m.valEnd = int(d.InputOffset())
		m.valStart = m.valEnd - len(v)
		if err := fn(m); err != nil {
			return 0, 0, err
		}
	}
	end, err = s.close()
	if err != nil {
		return 0, 0, err
	}
	return open, end, nil
}

// scanner is a pooled tokenizer. It reads the input in place: a Decoder
// over a bytes.Buffer parses the buffer's bytes without copying them, so
// its offsets are offsets into the input.
type scanner struct {
	data []byte
	buf  bytes.Buffer
	dec  jsontext.Decoder
}

var scanners = sync.Pool{New: func() any { return new(scanner) }}

// readOptions make jsontext accept what json.Valid accepts.
var readOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

func getScanner(data []byte) *scanner {
	s := scanners.Get().(*scanner)
	s.data = data
	s.buf = *bytes.NewBuffer(data)
	s.dec.Reset(&s.buf, readOptions...)
	return s
}

// release returns s to the pool without a reference to its input.
func (s *scanner) release() {
	s.data = nil
	s.buf = bytes.Buffer{}
	s.dec.Reset(&s.buf)
	scanners.Put(s)
}

// open reads the opening delimiter of the top-level value, which must be
// delim ('{' or '[').
func (s *scanner) open(delim jsontext.Kind) error {
	tok, err := s.dec.ReadToken()
	if err != nil {
		return syntaxError(err)
	}
	if k := tok.Kind(); k != delim {
		// Name the value's type only if it is JSON.
		if !json.Valid(s.data) {
			return malformed("not valid JSON")
		}
		want := "an object"
		if delim == '[' {
			want = "an array"
		}
		return malformed("a JSON %s, not %s", kindName(k), want)
	}
	return nil
}

// close reads the closing delimiter and checks that only whitespace
// follows. It returns the delimiter's offset.
func (s *scanner) close() (int, error) {
	if _, err := s.dec.ReadToken(); err != nil {
		return 0, syntaxError(err)
	}
	end := int(s.dec.InputOffset()) - 1
	if _, err := s.dec.ReadToken(); err != io.EOF {
		return 0, malformed("not valid JSON: data after the top-level value")
	}
	return end, nil
}

// syntaxError wraps a tokenizer error.
func syntaxError(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: not valid JSON: %w", ErrMalformed, err)
}

// kindName names a JSON kind for an error message.
func kindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case '0':
		return "number"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "value"
}

// Field is one member that Lookup reads from an object: the member named
// Name (after unescaping, as Key.Is compares) has its raw value stored in
// *Value, a capped sub-slice of the object, or nil when there is none.
//
// When Fields is set and the member's value is an object, Lookup reads
// those members of it too, in the same pass: a caller that wants a member
// of a member does not pay a second reading of the value. When the value
// is not an object, every Value in Fields is left nil.
type Field struct {
	Name   string
	Value  *[]byte
	Fields []Field
}

// Lookup stores in each field the raw value of the member of obj with that
// name (and, for a field with Fields, the members of that value). It reads
// obj once for all fields, however deep.
//
// It fails (ErrMalformed) when obj is not a valid JSON object or when a
// wanted name appears twice in its object: RFC 8259 leaves the meaning of
// a repeated name open, and a value that different readers read
// differently must not route anything. The whole of obj is checked even
// when a name repeats, so that input that is not JSON is always reported
// as such. Names other than the wanted ones may repeat.
func Lookup(obj []byte, fields ...Field) error {
	clearFields(fields)
	s := getScanner(obj)
	defer s.release()
	if err := s.open('{'); err != nil {
		return err
	}
	var repeated error
	if err := s.lookupMembers(fields, &repeated); err != nil {
		return err
	}
	if _, err := s.close(); err != nil {
		return err
	}
	return repeated
}

func clearFields(fields []Field) {
	for _, f := range fields {
		*f.Value = nil
		clearFields(f.Fields)
	}
}

// lookupMembers reads the members of the object whose '{' was just read,
// up to its '}' (not read), storing the wanted ones. The first repeated
// wanted name goes to *repeated; reading goes on.
func (s *scanner) lookupMembers(fields []Field, repeated *error) error {
	d := &s.dec
	for d.PeekKind() != '}' {
		k, err := d.ReadValue()
		if err != nil {
			return syntaxError(err)
		}
		keyEnd := int(d.InputOffset())
		f := matchField(fields, Key(s.data[keyEnd-len(k):keyEnd]))
		var value []byte
		if f != nil && f.Fields != nil && *f.Value == nil && d.PeekKind() == '{' {
			// Descend: the value is read token by token here, its
			// members by the same loop, instead of skipped whole and
			// read again by the caller.
			if _, err := d.ReadToken(); err != nil {
				return syntaxError(err)
			}
			start := int(d.InputOffset()) - 1
			if err := s.lookupMembers(f.Fields, repeated); err != nil {
				return err
			}
			if _, err := d.ReadToken(); err != nil {
				return syntaxError(err)
			}
			end := int(d.InputOffset())
			value = s.data[start:end:end]
		} else {
			v, err := d.ReadValue()
			if err != nil {
				return syntaxError(err)
			}
			end := int(d.InputOffset())
			value = s.data[end-len(v) : end : end]
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
		*f.Value = value
	}
	return nil
}

// matchField returns the field that key names, or nil. The key is decoded
// once, whatever the number of fields; keys without escapes, nearly all
// of them, are compared without allocating.
func matchField(fields []Field, key Key) *Field {
	inner, plain := key.plain()
	var name string
	if !plain {
		name = unquote(key)
	}
	for i := range fields {
		if plain && string(inner) == fields[i].Name || !plain && name == fields[i].Name {
			return &fields[i]
		}
	}
	return nil
}

// describe renders a raw value for an error message: missing, its text
// when short, else its JSON type.
func describe(v []byte) string {
	switch {
	case v == nil:
		return "missing"
	case len(v) > 40:
		return "a JSON " + kindName(jsontext.Value(v).Kind())
	}
	return string(v)
}
