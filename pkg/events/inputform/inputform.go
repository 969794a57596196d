package inputform

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
)

// Schema is the requested schema of a form elicitation, read for
// checking answers: ACP allows a flat object of primitive properties.
type Schema struct {
	Properties map[string]Property
	Required   []string
}

// Property is one property of an Schema: its JSON type
// ("string", "number", "integer", "boolean", "array" of strings, or a
// custom one, "" when the agent named none it could), and the values an
// enum allows (nil: any).
type Property struct {
	Type string
	Enum []string
}

// Parse reads the params of an elicitation/create (with or
// without sessionId): mode "form" with a message and a requestedSchema
// whose properties are objects with a type. Anything else (a URL
// elicitation, which Skein does not advertise, or a schema it cannot
// check answers against) is CodeAdapterProtocol.
func Parse(params []byte) (*Schema, error) {
	var p struct {
		Mode            *string         `json:"mode"`
		Message         *string         `json:"message"`
		RequestedSchema json.RawMessage `json:"requestedSchema"`
	}
	if !isJSONObject(params) || json.Unmarshal(params, &p) != nil {
		return nil, events.Errorf(events.CodeAdapterProtocol, "elicitation/create: params are not an object")
	}
	if p.Mode == nil || *p.Mode != "form" {
		return nil, events.Errorf(events.CodeAdapterProtocol, "elicitation/create: only mode \"form\" is advertised")
	}
	if p.Message == nil {
		return nil, events.Errorf(events.CodeAdapterProtocol, "elicitation/create: message is required")
	}
	var s struct {
		Type       *string                    `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if len(p.RequestedSchema) == 0 || !isJSONObject(p.RequestedSchema) || json.Unmarshal(p.RequestedSchema, &s) != nil {
		return nil, events.Errorf(events.CodeAdapterProtocol, "elicitation/create: requestedSchema is not an object schema")
	}
	if s.Type != nil && *s.Type != "object" {
		return nil, events.Errorf(events.CodeAdapterProtocol, "elicitation/create: requestedSchema type is %q, not \"object\"", *s.Type)
	}
	out := &Schema{Properties: make(map[string]Property, len(s.Properties)), Required: s.Required}
	for name, raw := range s.Properties {
		var prop struct {
			Type  string                   `json:"type"`
			Enum  []string                 `json:"enum"`
			OneOf []struct{ Const string } `json:"oneOf"`
			Items *struct {
				Enum  []string                 `json:"enum"`
				AnyOf []struct{ Const string } `json:"anyOf"`
			} `json:"items"`
		}
		if !isJSONObject(raw) || json.Unmarshal(raw, &prop) != nil {
			return nil, events.Errorf(events.CodeAdapterProtocol, "elicitation/create: property %q is not a property schema", events.Truncate(name, 64))
		}
		p := Property{Type: prop.Type, Enum: prop.Enum}
		for _, o := range prop.OneOf {
			p.Enum = append(p.Enum, o.Const)
		}
		if prop.Items != nil {
			p.Enum = prop.Items.Enum
			for _, o := range prop.Items.AnyOf {
				p.Enum = append(p.Enum, o.Const)
			}
		}
		out.Properties[name] = p
	}
	for _, r := range s.Required {
		if _, ok := out.Properties[r]; !ok {
			return nil, events.Errorf(events.CodeAdapterProtocol, "elicitation/create: required property %q is not in the schema", events.Truncate(r, 64))
		}
	}
	return out, nil
}

// Check checks the content of an accept against the schema: an object
// (nil is an empty one) whose members are properties of the schema, each
// of its type (an enum's value one of the enum's), with every required
// property present. A custom property type takes any value elicitation
// content may hold (a string, a number, a boolean, an array of strings).
// Anything else is CodeInvalidRequest.
func (s *Schema) Check(content events.JSON) error {
	present := map[string]bool{}
	if len(content) > 0 {
		if !isJSONObject(content) || !json.Valid(content) {
			return events.Errorf(events.CodeInvalidRequest, "content must be a JSON object")
		}
		err := acp.Members(content, func(key acp.Key, value []byte) error {
			name := key.Name()
			if present[name] {
				return events.Errorf(events.CodeInvalidRequest, "content: %q is given twice", events.Truncate(name, 64))
			}
			present[name] = true
			prop, ok := s.Properties[name]
			if !ok {
				return events.Errorf(events.CodeInvalidRequest, "content: %q is not a field of the requested schema", events.Truncate(name, 64))
			}
			return prop.check(name, value)
		})
		if err != nil {
			if _, ok := err.(*events.Error); ok {
				return err
			}
			return events.Errorf(events.CodeInvalidRequest, "content: %v", err)
		}
	}
	for _, r := range s.Required {
		if !present[r] {
			return events.Errorf(events.CodeInvalidRequest, "content: required field %q is missing", events.Truncate(r, 64))
		}
	}
	return nil
}

// check checks one content value, raw JSON, against p.
func (p Property) check(name string, value []byte) error {
	bad := func(want string) error {
		return events.Errorf(events.CodeInvalidRequest, "content: %q must be %s", events.Truncate(name, 64), want)
	}
	switch p.Type {
	case "string":
		var v string
		if value[0] != '"' || json.Unmarshal(value, &v) != nil {
			return bad("a string")
		}
		if p.Enum != nil && !slices.Contains(p.Enum, v) {
			return bad("one of the enum's values")
		}
	case "number":
		if !isNumber(value) {
			return bad("a number")
		}
	case "integer":
		if !isInteger(value) {
			return bad("an integer")
		}
	case "boolean":
		if string(value) != "true" && string(value) != "false" {
			return bad("a boolean")
		}
	case "array":
		var vs []string
		if value[0] != '[' || json.Unmarshal(value, &vs) != nil {
			return bad("an array of strings")
		}
		for _, v := range vs {
			if p.Enum != nil && !slices.Contains(p.Enum, v) {
				return bad("an array of the enum's values")
			}
		}
	default:
		var vs []string
		if value[0] != '"' && !isNumber(value) && string(value) != "true" && string(value) != "false" &&
			(value[0] != '[' || json.Unmarshal(value, &vs) != nil) {
			return bad("a string, a number, a boolean or an array of strings")
		}
	}
	return nil
}

// isNumber reports whether value is a JSON number.
func isNumber(value []byte) bool {
	if len(value) == 0 || value[0] != '-' && (value[0] < '0' || value[0] > '9') {
		return false
	}
	var n json.Number
	return json.Unmarshal(value, &n) == nil
}

// isInteger reports whether value is a JSON number with an integral value
// that fits an int64 (ACP's content integers are int64): 3 and 3.0 are,
// 3.5 and 1e30 are not.
func isInteger(value []byte) bool {
	if !isNumber(value) {
		return false
	}
	if _, err := strconv.ParseInt(string(value), 10, 64); err == nil {
		return true
	}
	f, err := strconv.ParseFloat(string(value), 64)
	return err == nil && f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64
}

// isJSONObject reports whether raw, after white space, begins an object.
func isJSONObject(raw []byte) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}
