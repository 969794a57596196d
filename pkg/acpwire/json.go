package acpwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// This file reads the members of JSON objects without decoding them, so
// that every raw value the package hands out is a sub-slice of the
// original bytes (never a re-encoding) and object keys are matched
// exactly: encoding/json matches struct fields case-insensitively and lets
// the last duplicate win, which would let {"ID":1} or {"id":1,"id":2}
// through as JSON-RPC.
//
// The tokenizer is github.com/go-json-experiment/json/jsontext (the
// encoding/json/v2 one), set to accept what json.Valid accepts: invalid
// UTF-8 in strings and repeated names are allowed here and judged by the
// callers. It validates and locates in one pass. (skein.dev/pkg/acp holds
// the same reader for the services; this package imports nothing of
// Skein, so it has its own few lines over the same tokenizer.)

// errNotJSON and errNotObject are the failures of walking a value that is
// not a JSON object; the callers turn them into protocol errors.
var (
	errNotJSON   = errors.New("not JSON")
	errNotObject = errors.New("not a JSON object")
	errNotArray  = errors.New("not a JSON array")
)

// scanner is a pooled tokenizer. A Decoder over a bytes.Buffer parses the
// buffer's bytes in place, so its offsets are offsets into the input.
type scanner struct {
	buf bytes.Buffer
	dec jsontext.Decoder
}

var scanners = sync.Pool{New: func() any { return new(scanner) }}

// readOptions make jsontext accept what json.Valid accepts.
var readOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// each reads data, which must be one JSON value opening with delim ('{'
// or '['), and calls fn with the raw bytes of each member's key (quotes
// included; nil for arrays) and value, in order. Values are capped
// sub-slices of data without surrounding whitespace. It returns errNotJSON
// (wrapped) when data is not valid JSON, errNotObject or errNotArray when
// it is JSON of another type. fn's error does not stop the walk: the
// first one is returned after the rest of data has been checked, so that
// invalid JSON is reported as such whatever fn found before the fault.
func each(data []byte, delim jsontext.Kind, fn func(key, val []byte) error) error {
	s := scanners.Get().(*scanner)
	s.buf = *bytes.NewBuffer(data)
	s.dec.Reset(&s.buf, readOptions...)
	defer func() {
		s.buf = bytes.Buffer{}
		s.dec.Reset(&s.buf)
		scanners.Put(s)
	}()
	d := &s.dec

	tok, err := d.ReadToken()
	if err != nil {
		return fmt.Errorf("%w: %w", errNotJSON, err)
	}
	if tok.Kind() != delim {
		switch {
		case !json.Valid(data):
			return errNotJSON
		case delim == '[':
			return errNotArray
		default:
			return errNotObject
		}
	}
	end := jsontext.Kind('}')
	if delim == '[' {
		end = ']'
	}
	var fnErr error
	for d.PeekKind() != end {
		var key []byte
		if delim == '{' {
			k, err := d.ReadValue()
			if err != nil {
				return fmt.Errorf("%w: %w", errNotJSON, err)
			}
			off := int(d.InputOffset())
			key = data[off-len(k) : off : off]
		}
		v, err := d.ReadValue()
		if err != nil {
			return fmt.Errorf("%w: %w", errNotJSON, err)
		}
		off := int(d.InputOffset())
		if err := fn(key, data[off-len(v):off:off]); err != nil && fnErr == nil {
			fnErr = err
		}
	}
	if _, err := d.ReadToken(); err != nil {
		return fmt.Errorf("%w: %w", errNotJSON, err)
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return fmt.Errorf("%w: data after the top-level value", errNotJSON)
	}
	return fnErr
}

// eachElement calls fn for each element of the JSON array data, in order.
// Errors are as for each.
func eachElement(data []byte, fn func(val []byte) error) error {
	return each(data, '[', func(_, val []byte) error { return fn(val) })
}

// field is one member wanted by getFields.
type field struct {
	name string
	val  *[]byte
}

// getFields stores in each field the raw value of the member of the JSON
// object obj with that name (nil when absent). A name that appears twice
// is an error: the two values would be read differently by different
// decoders. Errors are as for each.
func getFields(obj []byte, fields ...field) error {
	for _, f := range fields {
		*f.val = nil
	}
	return each(obj, '{', func(key, val []byte) error {
		for _, f := range fields {
			if keyIs(key, f.name) {
				if *f.val != nil {
					return errors.New("duplicate key " + strconv.Quote(f.name))
				}
				*f.val = val
			}
		}
		return nil
	})
}

// keyIs reports whether the raw (quoted) key spells name. Keys without
// escapes, which is all real traffic, are compared without allocating.
func keyIs(key []byte, name string) bool {
	if inner := key[1 : len(key)-1]; bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner) == name
	}
	s, ok := unquote(key)
	return ok && s == name
}

// unquote decodes the JSON string value v with the semantics of
// encoding/json (invalid UTF-8 becomes U+FFFD). ok is false when v is not a
// string.
func unquote(v []byte) (s string, ok bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), true
	}
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false
	}
	return s, true
}

// trimSpace returns data without leading and trailing JSON whitespace.
func trimSpace(data []byte) []byte { return bytes.Trim(data, " \t\r\n") }

// valueType names the JSON type of the raw value v (the tokenizer's
// output, or a trimmed valid value), for error messages and shape checks.
func valueType(v []byte) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch jsontext.Value(v).Kind() {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// isNull reports whether v is absent or the JSON literal null.
func isNull(v []byte) bool { return len(v) == 0 || string(v) == "null" }

// integer parses the JSON number v as an int64. It accepts integral values
// written with a fraction or exponent (1.0, 1e3), which JSON-RPC discourages
// but does not forbid.
func integer(v []byte) (int64, bool) {
	if valueType(v) != "number" {
		return 0, false
	}
	if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, false
	}
	return int64(f), true
}
