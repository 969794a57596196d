package acpwire

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"skein.dev/pkg/acp"
)

// This file adapts skein.dev/pkg/acp's reader (acp.Lookup, Skein's one
// byte-preserving reader of JSON objects) to the protocol errors of this
// package. acp.Lookup hands out sub-slices of the original bytes (never a
// re-encoding) and matches member names exactly: encoding/json matches
// struct fields case-insensitively and lets the last duplicate win, which
// would let {"ID":1} or {"id":1,"id":2} through as JSON-RPC. A wanted
// member that repeats is refused, and the whole value is validated even
// then, so that input that is not JSON is reported as such.

// field names one member wanted by getFields.
type field = acp.Field

// shapeError is the failure of reading data as a JSON object or array.
type shapeError int

const (
	errNotJSON shapeError = iota + 1
	errNotObject
	errNotArray
)

func (e shapeError) Error() string {
	switch e {
	case errNotJSON:
		return "not JSON"
	case errNotArray:
		return "not a JSON array"
	default:
		return "not a JSON object"
	}
}

// getFields stores in each field the raw value of the member of the JSON
// object obj with that name (nil when absent), as acp.Lookup does. It
// returns errNotJSON when obj is not valid JSON, errNotObject when it is
// JSON of another type, and acp's error for a wanted name that repeats.
func getFields(obj []byte, fields ...field) error {
	err := acp.Lookup(obj, fields...)
	if err != nil {
		return shape(obj, '{', err)
	}
	return nil
}

// eachElement calls fn for each element of the JSON array data, in order.
// It returns errNotJSON when data is not valid JSON, errNotArray when it
// is JSON of another type, and otherwise fn's first error, after the rest
// of data has been checked.
func eachElement(data []byte, fn func(val []byte) error) error {
	var fnErr error
	err := acp.Elements(data, func(v []byte) error {
		if err := fn(v); err != nil && fnErr == nil {
			fnErr = err
		}
		return nil
	})
	if err != nil {
		return shape(data, '[', err)
	}
	return fnErr
}

// shape classifies err, acp's refusal of data as a JSON value opening
// with delim. It runs only on that error path.
func shape(data []byte, delim byte, err error) error {
	switch v := trimSpace(data); {
	case !json.Valid(data):
		return errNotJSON
	case v[0] != delim && delim == '[':
		return errNotArray
	case v[0] != delim:
		return errNotObject
	}
	return err
}

// trimSpace returns data without leading and trailing JSON whitespace.
func trimSpace(data []byte) []byte { return bytes.Trim(data, " \t\r\n") }

// valueType names the JSON type of the raw value v (the tokenizer's
// output, or a trimmed valid value), for error messages and shape checks.
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
