package inputform_test

import (
	"encoding/json"
	"math"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/inputform"
)

const testSchema = `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"ratio":{"type":"number"},"ok":{"type":"boolean"},"color":{"type":"string","enum":["red","blue"]},"size":{"type":"string","oneOf":[{"const":"s","title":"Small"},{"const":"l","title":"Large"}]},"tags":{"type":"array","items":{"type":"string","enum":["a","b"]}},"x":{"type":"_custom"}},"required":["name"]}`

func testParams(schema string) string {
	return `{"sessionId":"acp-1","mode":"form","message":"Who?","requestedSchema":` + schema + `}`
}

func TestParse(t *testing.T) {
	if _, err := inputform.Parse([]byte(testParams(testSchema))); err != nil {
		t.Fatalf("a valid request: %v", err)
	}
	for name, params := range map[string]string{
		"url mode":          `{"sessionId":"a","mode":"url","message":"m","elicitationId":"e","url":"https://x"}`,
		"no mode":           `{"message":"m","requestedSchema":{"type":"object"}}`,
		"no message":        `{"mode":"form","requestedSchema":{"type":"object"}}`,
		"no schema":         `{"mode":"form","message":"m"}`,
		"schema not object": `{"mode":"form","message":"m","requestedSchema":[]}`,
		"schema type":       `{"mode":"form","message":"m","requestedSchema":{"type":"array"}}`,
		"property array":    `{"mode":"form","message":"m","requestedSchema":{"properties":{"a":[]}}}`,
		"required unknown":  `{"mode":"form","message":"m","requestedSchema":{"properties":{},"required":["a"]}}`,
		"not an object":     `[]`,
		"invalid":           `{"mode":`,
	} {
		if _, err := inputform.Parse([]byte(params)); err == nil || events.AsError(err).Code != events.CodeAdapterProtocol {
			t.Errorf("%s: %v, want %s", name, err, events.CodeAdapterProtocol)
		}
	}
}

func TestSchemaCheck(t *testing.T) {
	s, err := inputform.Parse([]byte(testParams(testSchema)))
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{
		`{"name":"n"}`,
		` { "name" : "" , "age" : -3 } `,
		`{"name":"n","age":3.0,"ratio":1e-3,"ok":false,"color":"red","size":"l","tags":["a","b"],"x":[]}`,
		`{"name":"n","x":"s"}`,
		`{"name":"n","x":2}`,
		`{"name":"n","age":9223372036854775807}`,
	} {
		if err := s.Check(events.JSON(ok)); err != nil {
			t.Errorf("Check(%s) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{
		``, `{}`, `{"age":1}`, `null`, `[]`, `"name"`, `{"name":"n"`,
		`{"name":1}`, `{"name":null}`, `{"name":"n","age":1.5}`, `{"name":"n","age":"1"}`, `{"name":"n","age":1e300}`,
		`{"name":"n","ratio":"1"}`, `{"name":"n","ok":1}`, `{"name":"n","color":"green"}`, `{"name":"n","size":"m"}`,
		`{"name":"n","tags":["c"]}`, `{"name":"n","tags":"a"}`, `{"name":"n","x":{}}`, `{"name":"n","x":null}`,
		`{"name":"n","other":1}`, `{"name":"n","name":"m"}`,
	} {
		if err := s.Check(events.JSON(bad)); err == nil || events.AsError(err).Code != events.CodeInvalidRequest {
			t.Errorf("Check(%s) = %v, want %s", bad, err, events.CodeInvalidRequest)
		}
	}
}

// FuzzCheck: Check never panics, and content it accepts is a JSON
// object whose every member is a property of the schema holding a value of
// the property's type, with every required property present.
func FuzzCheck(f *testing.F) {
	for _, seed := range []string{`{"name":"n"}`, `{"name":"n","age":3.0,"tags":["a"]}`, `{"name":1}`, `{}`, `[]`, `{"name":"n","age":1e19}`, "{\"name\":\"\xff\"}"} {
		f.Add([]byte(seed))
	}
	s, err := inputform.Parse([]byte(testParams(testSchema)))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		if s.Check(events.JSON(content)) != nil {
			return
		}
		var m map[string]any
		if len(content) > 0 {
			if err := json.Unmarshal(content, &m); err != nil || m == nil {
				t.Fatalf("Check accepted %q, which is not a JSON object (%v)", content, err)
			}
		}
		if _, ok := m["name"].(string); !ok {
			t.Fatalf("Check accepted %q without a string name", content)
		}
		for k, v := range m {
			var ok bool
			switch k {
			case "name":
				_, ok = v.(string)
			case "age":
				n, isNum := v.(float64)
				ok = isNum && n == math.Trunc(n)
			case "ratio":
				_, ok = v.(float64)
			case "ok":
				_, ok = v.(bool)
			case "color":
				ok = v == "red" || v == "blue"
			case "size":
				ok = v == "s" || v == "l"
			case "tags":
				vs, isArr := v.([]any)
				ok = isArr
				for _, e := range vs {
					ok = ok && (e == "a" || e == "b")
				}
			case "x":
				switch x := v.(type) {
				case string, float64, bool:
					ok = true
				case []any:
					ok = true
					for _, e := range x {
						_, isStr := e.(string)
						ok = ok && isStr
					}
				}
			}
			if !ok {
				t.Fatalf("Check accepted %q: %s = %v", content, k, v)
			}
		}
	})
}

// FuzzParse: reading an agent's request never panics, and a
// schema it accepts can check any content without panicking.
func FuzzParse(f *testing.F) {
	f.Add([]byte(testParams(testSchema)), []byte(`{"name":"n"}`))
	f.Add([]byte(`{"mode":"form","message":"m","requestedSchema":{"properties":{"a":{}}}}`), []byte(`{"a":[1]}`))
	f.Fuzz(func(t *testing.T, params, content []byte) {
		s, err := inputform.Parse(params)
		if err != nil {
			if events.AsError(err).Code != events.CodeAdapterProtocol {
				t.Fatalf("Parse(%q) = %v", params, err)
			}
			return
		}
		if err := s.Check(events.JSON(content)); err != nil && events.AsError(err).Code != events.CodeInvalidRequest {
			t.Fatalf("Check(%q) = %v", content, err)
		}
	})
}
