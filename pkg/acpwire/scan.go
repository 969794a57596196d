package acpwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"unicode/utf8"
)

// This file holds a small scanner over JSON that encoding/json has already
// validated. It exists so that every raw value the package hands out is a
// sub-slice of the original bytes (never a re-encoding) and so that object
// keys are matched exactly: encoding/json matches struct fields
// case-insensitively and lets the last duplicate win, which would let
// {"ID":1} or {"id":1,"id":2} through as JSON-RPC.
//
// Every function still checks its bounds, so that a caller that skipped
// validation gets an error, never a panic.

var errScan = errors.New("malformed JSON")

// isSpace reports whether c is JSON whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(data []byte, i int) int {
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	return i
}

// trimSpace returns data without leading and trailing JSON whitespace.
func trimSpace(data []byte) []byte {
	i := skipSpace(data, 0)
	j := len(data)
	for j > i && isSpace(data[j-1]) {
		j--
	}
	return data[i:j]
}

// endOfString returns the index just past the string that starts at data[i]
// (which must be '"').
func endOfString(data []byte, i int) (int, error) {
	if i >= len(data) || data[i] != '"' {
		return 0, errScan
	}
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++ // skip the escaped byte; \uXXXX digits need no care
		case '"':
			return j + 1, nil
		}
	}
	return 0, errScan
}

// endOfValue returns the index just past the value that starts at data[i].
func endOfValue(data []byte, i int) (int, error) {
	if i >= len(data) {
		return 0, errScan
	}
	switch data[i] {
	case '"':
		return endOfString(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				end, err := endOfString(data, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errScan
	default: // number, true, false, null
		j := i
		for j < len(data) && !isSpace(data[j]) && data[j] != ',' && data[j] != '}' && data[j] != ']' {
			j++
		}
		if j == i {
			return 0, errScan
		}
		return j, nil
	}
}

// eachMember calls fn for each member of the object data (valid JSON, which
// may have surrounding whitespace), in document order. key is the raw key
// including its quotes; val is the value without surrounding whitespace,
// capped so that appending to it cannot overwrite data. It returns errNotObject
// when data is not an object.
func eachMember(data []byte, fn func(key, val []byte) error) error {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return errNotObject
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return nil
	}
	for {
		kEnd, err := endOfString(data, i)
		if err != nil {
			return err
		}
		key := data[i:kEnd:kEnd]
		i = skipSpace(data, kEnd)
		if i >= len(data) || data[i] != ':' {
			return errScan
		}
		i = skipSpace(data, i+1)
		vEnd, err := endOfValue(data, i)
		if err != nil {
			return err
		}
		if err := fn(key, data[i:vEnd:vEnd]); err != nil {
			return err
		}
		i = skipSpace(data, vEnd)
		if i >= len(data) {
			return errScan
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return nil
		default:
			return errScan
		}
	}
}

// eachElement calls fn for each element of the array data (valid JSON), in
// order. It returns errNotArray when data is not an array.
func eachElement(data []byte, fn func(val []byte) error) error {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return errNotArray
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return nil
	}
	for {
		vEnd, err := endOfValue(data, i)
		if err != nil {
			return err
		}
		if err := fn(data[i:vEnd:vEnd]); err != nil {
			return err
		}
		i = skipSpace(data, vEnd)
		if i >= len(data) {
			return errScan
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case ']':
			return nil
		default:
			return errScan
		}
	}
}

var (
	errNotObject = errors.New("not a JSON object")
	errNotArray  = errors.New("not a JSON array")
)

// keyIs reports whether the raw (quoted) key spells name. Keys without
// escapes, which is all real traffic, are compared without allocating.
func keyIs(key []byte, name string) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return len(key) == len(name)+2 && string(key[1:len(key)-1]) == name
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

// valueType names the JSON type of the value v, for error messages and
// shape checks.
func valueType(v []byte) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
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

// field is one member wanted by getFields.
type field struct {
	name string
	val  *[]byte
}

// getFields stores in each field the raw value of the member with that name
// (nil when absent). The object must be valid JSON. A name that appears twice
// is an error: the two values would be read differently by different
// decoders.
func getFields(obj []byte, fields ...field) error {
	for _, f := range fields {
		*f.val = nil
	}
	return eachMember(obj, func(key, val []byte) error {
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
