package events_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"skein.dev/pkg/events"
)

// This file checks protocol.go against the AgentOS ACP extension schema. It
// parses testdata/agentos-protocol.schema (a copy of
// shared/seeds/agentos-protocol.schema) and compares every type, field,
// optional-ness, field type and union member with the Go types registered
// in the variant registry, read by reflection over their msgpack tags.

const schemaFile = "testdata/agentos-protocol.schema"

// seedSchema is the schema's home, relative to this package's directory.
const seedSchema = "../../../shared/seeds/agentos-protocol.schema"

// unionTypes maps each schema union to its Go interface and to the Go type
// of a struct field of that union type.
var unionTypes = map[string]struct{ iface, field reflect.Type }{
	"AcpRequest":          {reflect.TypeFor[events.AcpRequest](), reflect.TypeFor[events.Union[events.AcpRequest]]()},
	"AcpResponse":         {reflect.TypeFor[events.AcpResponse](), reflect.TypeFor[events.Union[events.AcpResponse]]()},
	"AcpDurableEvent":     {reflect.TypeFor[events.AcpDurableEvent](), reflect.TypeFor[events.Union[events.AcpDurableEvent]]()},
	"AcpEvent":            {reflect.TypeFor[events.AcpEvent](), reflect.TypeFor[events.Union[events.AcpEvent]]()},
	"AcpCallback":         {reflect.TypeFor[events.AcpCallback](), reflect.TypeFor[events.Union[events.AcpCallback]]()},
	"AcpCallbackResponse": {reflect.TypeFor[events.AcpCallbackResponse](), reflect.TypeFor[events.Union[events.AcpCallbackResponse]]()},
}

// enumTypes maps each schema enum to its Go type and Go constants. Go
// constants cannot be found by reflection, so they are listed here.
var enumTypes = map[string]struct {
	typ    reflect.Type
	values []string
}{
	"AcpRuntimeKind": {
		reflect.TypeFor[events.AcpRuntimeKind](),
		[]string{string(events.RuntimeJavaScript), string(events.RuntimePython), string(events.RuntimeWebAssembly)},
	},
}

// aliasTypes maps each schema alias (type X str) to its Go type. JsonUtf8
// is JSON: exact bytes, carried as msgpack bin rather than str so that
// nothing on the way re-encodes it.
var aliasTypes = map[string]reflect.Type{
	"JsonUtf8": reflect.TypeFor[events.JSON](),
}

// extraFields allows Go fields beyond the schema, keyed "Struct.tag", each
// with the reason. Every extra field must be optional (omitempty), so that
// a payload from a writer that knows only the schema decodes the same.
var extraFields = map[string]string{
	"AcpDurableHistoryEntry.eventNo":          "Skein extension: the contiguous per-session event number (HeaderEventNo), so readers tell pruned history from stream-sequence gaps",
	"AcpDurableSessionEvent.eventNo":          "Skein extension: same as AcpDurableHistoryEntry.eventNo, on live delivery",
	"AcpDurableSessionInfo.usage":             "Skein extension: the agent's last usage_update, cached (offers.go)",
	"AcpDurableSessionInfo.lastTurnTiming":    "Skein extension: the last turn's timing, measured by the session service (offers.go)",
	"AcpDurableSessionInfo.logSequence":       "Skein extension: the log sequence the state is as of, the gateway watch's cursor (services/gateway/watch.go)",
	"AcpReadHistoryRequest.includeState":      "Skein extension: interleave the session's state changes among the events (sessionstate.go)",
	"AcpOpenSessionRequest.inputPolicy":       "Skein extension: who answers the session's input requests (ACP elicitation), input.go",
	"AcpOpenSessionRequest.placement":         "Skein extension: the runner, or the labels of the runner, a session is pinned to (edge runners; services/session/placement.go)",
	"AcpDurableSessionInfo.runner":            "Skein extension: the runner a placed session is pinned to (services/session/placement.go)",
	"AcpListAgentsResponse.runners":           "Skein extension: each live runner, what it offers, its labels and load, for placement (services/history)",
	"AcpDurableHistoryEntry.principal":        "Skein extension: who caused the event (HeaderPrincipal), on user messages and answers",
	"AcpDurableSessionInfo.createdBy":         "Skein extension: the principal that opened the session",
	"AcpOpenSessionRequest.budget":            "Skein extension: the session's spending cap (budget.go)",
	"AcpDurableSessionInfo.budget":            "Skein extension: the session's spending cap and spend (budget.go)",
	"AcpRespondPermissionResponse.resolvedBy": "Skein extension: for a late answer, the principal whose answer won",
	"AcpPromptRequest.queue":                  "Skein extension: queue the prompt while a turn runs (queue.go)",
	"AcpDurableSessionInfo.queued":            "Skein extension: the prompts waiting in the session's queue (queue.go)",
	"AcpDurableSessionInfo.queueHeld":         "Skein extension: the queue waits for the next prompt sent without queue (queue.go)",
}

// extraMembers allows Go variants to join a union of the schema, keyed
// "Union.Variant", each with the reason. They are Skein's own variants, not
// Acp* types.
var extraMembers = map[string]string{
	"AcpDurableEvent.InputRequest":       "Skein addition: an agent's elicitation/create, the durable input_request event (input.go)",
	"AcpDurableEvent.SessionStateChange": "Skein addition: a change of the session's state, derived from the log, in a history page that asks for it (sessionstate.go)",
	"AcpDurableEvent.InputResponse":      "Skein addition: how an input request ended, the durable input_response event (input.go)",
}

func TestSchemaConformance(t *testing.T) {
	s := readSchema(t, schemaFile)
	for _, p := range checkConformance(s) {
		t.Error(p)
	}
}

// TestSchemaSeedCopy keeps testdata's copy of the schema identical to the
// seed it was copied from, when the seed is there to compare.
func TestSchemaSeedCopy(t *testing.T) {
	seed, err := os.ReadFile(seedSchema)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s not found: this checkout has no shared seeds to compare with", seedSchema)
	}
	if err != nil {
		t.Fatal(err)
	}
	copied, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(seed, copied) {
		t.Errorf("%s differs from %s: copy the seed again and fix what TestSchemaConformance then reports", schemaFile, seedSchema)
	}
}

// TestSchemaConformanceDetectsDrift proves the conformance check is not
// vacuous: each mutation of the schema must be reported.
func TestSchemaConformanceDetectsDrift(t *testing.T) {
	orig, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		old, new string
		want     string // a substring of some reported problem
	}{
		{"field type", "  latestSequence: u64", "  latestSequence: u32", "AcpDurableSessionInfo.latestSequence"},
		{"optional to required", "  title: optional<str>", "  title: str", "AcpDurableSessionInfo.title"},
		{"required to optional", "  agent: str\n  cwd: str", "  agent: optional<str>\n  cwd: str", "AcpDurableSessionInfo.agent"},
		{"one-line struct", "type AcpCancelPromptResponse struct { status: str }", "type AcpCancelPromptResponse struct { status: optional<str> }", "AcpCancelPromptResponse.status"},
		{"new field", "  content: JsonUtf8\n}", "  content: JsonUtf8\n  attachments: list<JsonUtf8>\n}", "AcpPromptRequest.attachments"},
		{"field gone", "  idempotencyKey: optional<str>\n", "", "AcpPromptRequest.idempotencyKey"},
		{"list element", "  configOptions: list<JsonUtf8>", "  configOptions: list<str>", "AcpSessionCreatedResponse.configOptions"},
		{"map value", "  env: map<str><str>", "  env: map<str><u32>", "AcpCreateSessionRequest.env"},
		{"data", "  chunk: data\n}\n\ntype AcpRequest", "  chunk: str\n}\n\ntype AcpRequest", "AcpDeliverAgentOutputRequest.chunk"},
		{"nested struct", "{ session: AcpDurableSessionInfo }", "{ session: AcpAgentEntry }", "AcpGetDurableSessionResponse.session"},
		{"union field", "  event: AcpDurableEvent\n}\ntype AcpHistoryPageResponse", "  event: AcpEvent\n}\ntype AcpHistoryPageResponse", "AcpDurableHistoryEntry.event"},
		{"enum value", "  WEB_ASSEMBLY\n", "  WEB_ASSEMBLY\n  NATIVE\n", "AcpRuntimeKind"},
		{"new type", "type AcpGetSessionStateRequest struct", "type AcpPingRequest struct { reserved: bool }\n\ntype AcpGetSessionStateRequest struct", "AcpPingRequest"},
		{"new union member", "  AcpListAgentsRequest\n}", "  AcpListAgentsRequest |\n  AcpPingRequest\n}\ntype AcpPingRequest struct { reserved: bool }", "AcpPingRequest"},
		{"union member gone", "  AcpDeliverAgentOutputRequest |\n  AcpListAgentsRequest\n}", "  AcpDeliverAgentOutputRequest\n}", "AcpListAgentsRequest implements AcpRequest"},
		{"union order", "  AcpDeleteSessionRequest |\n  AcpUnloadSessionRequest |", "  AcpUnloadSessionRequest |\n  AcpDeleteSessionRequest |", "UnionMembers[\"AcpRequest\"]"},
		{"new union", "type AcpCallbackResponse union {", "type AcpNotice union { AcpSessionEvent }\ntype AcpCallbackResponse union {", "AcpNotice"},
		{"extension field in schema", "  event: AcpDurableEvent\n}\ntype AcpHistoryPageResponse", "  event: AcpDurableEvent\n  eventNo: u64\n}\ntype AcpHistoryPageResponse", "AcpDurableHistoryEntry.eventNo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := string(orig)
			if !strings.Contains(text, tt.old) {
				t.Fatalf("schema has no %q to mutate", tt.old)
			}
			s, err := parseSchema(strings.Replace(text, tt.old, tt.new, 1))
			if err != nil {
				t.Fatalf("parseSchema(mutated) = %v", err)
			}
			problems := checkConformance(s)
			for _, p := range problems {
				if strings.Contains(p, tt.want) {
					return
				}
			}
			t.Errorf("checkConformance(mutated) = %q, want a problem mentioning %q", problems, tt.want)
		})
	}
}

func TestParseSchema(t *testing.T) {
	s, err := parseSchema(`proto 1.0
# comment
type J str   # trailing comment
type E enum { A B
  C }
type S struct { a: optional<list<map<str><J>>> }
type T struct {
  b: E
  c: S
}
type U union { S | T }
`)
	if err != nil {
		t.Fatalf("parseSchema = %v", err)
	}
	var got []string
	for _, st := range s.types {
		got = append(got, st.String())
	}
	want := []string{
		"type J str",
		"type E enum { A B C }",
		"type S struct { a: optional<list<map<str><J>>> }",
		"type T struct { b: E c: S }",
		"type U union { S | T }",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseSchema types mismatch (-want +got):\n%s", diff)
	}
	if s.name != "proto" || s.version != "1.0" {
		t.Errorf("parseSchema header = %q %q, want proto 1.0", s.name, s.version)
	}
}

func TestParseSchemaErrors(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"unknown kind", "type X record { a: str }"},
		{"unclosed struct", "type X struct { a: str"},
		{"missing colon", "type X struct { a str }"},
		{"unclosed generic", "type X struct { a: list<str }"},
		{"duplicate type", "type X struct { a: str }\ntype X struct { b: str }"},
		{"duplicate field", "type X struct { a: str a: u32 }"},
		{"undefined type", "type X struct { a: Y }"},
		{"bad arity", "type X struct { a: map<str> }"},
		{"union of non-struct", "type E enum { A }\ntype U union { E }"},
		{"empty union", "type U union { }"},
		{"dangling bar", "type X struct { a: str }\ntype U union { X | }"},
		{"stray character", "type X struct { a: str; }"},
		{"bad header", "proto\ntype X struct { a: str }"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if s, err := parseSchema(tt.in); err == nil {
				t.Errorf("parseSchema(%q) = %v, nil; want an error", tt.in, s.types)
			}
		})
	}
}

func readSchema(t testing.TB, path string) *schema {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseSchema(string(b))
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return s
}

// The conformance check.

// checkConformance returns every difference between s and the Go types.
func checkConformance(s *schema) []string {
	c := &conformance{s: s}
	c.checkTypes()
	c.checkUnions()
	return c.problems
}

type conformance struct {
	s        *schema
	problems []string
}

func (c *conformance) errorf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

var pkgPath = reflect.TypeFor[events.JSON]().PkgPath()

// goStruct returns the Go struct type registered under a schema struct's
// name.
func goStruct(name string) (reflect.Type, bool) {
	v, ok := events.NewVariant(name)
	if !ok {
		return nil, false
	}
	t := reflect.TypeOf(v)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, false
	}
	return t.Elem(), true
}

func (c *conformance) checkTypes() {
	for _, st := range c.s.types {
		switch st.kind {
		case kindAlias:
			if _, ok := aliasTypes[st.name]; !ok {
				c.errorf("schema alias %s (line %d) has no Go type: add it to aliasTypes", st.name, st.line)
			}
		case kindEnum:
			e, ok := enumTypes[st.name]
			if !ok {
				c.errorf("schema enum %s (line %d) has no Go type: add it to enumTypes", st.name, st.line)
				continue
			}
			if e.typ.Kind() != reflect.String || e.typ.Name() != st.name || e.typ.PkgPath() != pkgPath {
				c.errorf("enum %s: Go type is %v, want a string type events.%s", st.name, e.typ, st.name)
			}
			if diff := cmp.Diff(st.values, e.values); diff != "" {
				c.errorf("enum %s: Go constants differ from the schema (-schema +go):\n%s", st.name, diff)
			}
		case kindStruct:
			c.checkStruct(st)
		case kindUnion:
			if _, ok := unionTypes[st.name]; !ok {
				c.errorf("schema union %s (line %d) has no Go interface: add it to unionTypes", st.name, st.line)
			}
		}
	}
	for name := range unionTypes {
		if st := c.s.byName[name]; st == nil || st.kind != kindUnion {
			c.errorf("unionTypes lists %s, which is not a union of the schema", name)
		}
	}
	for name := range enumTypes {
		if st := c.s.byName[name]; st == nil || st.kind != kindEnum {
			c.errorf("enumTypes lists %s, which is not an enum of the schema", name)
		}
	}
	// Skein's own records share the registry; any other Acp* variant is a
	// protocol type the schema does not know.
	for _, name := range events.VariantNames() {
		if strings.HasPrefix(name, "Acp") && c.s.byName[name] == nil {
			c.errorf("Go variant %s is not a type of the schema", name)
		}
	}
}

func (c *conformance) checkStruct(st *schemaType) {
	gt, ok := goStruct(st.name)
	if !ok {
		c.errorf("schema struct %s (line %d) is not a registered Go variant (events.NewVariant)", st.name, st.line)
		return
	}
	if gt.Name() != st.name {
		c.errorf("schema struct %s is registered as Go type %s", st.name, gt.Name())
	}
	goFields := map[string]reflect.StructField{}
	var goOrder []string
	for f := range gt.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
		switch {
		case !f.IsExported() || name == "-":
			continue
		case f.Anonymous:
			c.errorf("%s.%s: embedded fields are not supported", st.name, f.Name)
			continue
		case name == "":
			name = f.Name
		}
		goFields[name] = f
		goOrder = append(goOrder, name)
	}
	for _, sf := range st.fields {
		where := st.name + "." + sf.name
		f, ok := goFields[sf.name]
		if !ok {
			c.errorf("%s (line %d): no Go field with tag %q", where, sf.line, sf.name)
			continue
		}
		delete(goFields, sf.name)
		if _, ext := extraFields[where]; ext {
			c.errorf("%s: now in the schema, remove it from extraFields", where)
		}
		c.checkField(where, sf.typ, f)
	}
	for _, name := range goOrder {
		f, extra := goFields[name]
		if !extra {
			continue
		}
		where := st.name + "." + name
		if _, ok := extraFields[where]; !ok {
			c.errorf("%s: Go field %s is not in the schema (allow an extension in extraFields, with a reason)", where, f.Name)
			continue
		}
		if !hasOmitEmpty(f) {
			c.errorf("%s: extension field must be optional (omitempty)", where)
		}
	}
	for key := range extraFields {
		typ, field, _ := strings.Cut(key, ".")
		if typ != st.name {
			continue
		}
		if _, ok := goFields[field]; !ok && !slices.ContainsFunc(st.fields, func(f schemaField) bool { return f.name == field }) {
			c.errorf("extraFields lists %s, which has no Go field", key)
		}
	}
}

func hasOmitEmpty(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
	return slices.Contains(strings.Split(opts, ","), "omitempty")
}

// checkField checks one Go field against its schema type. optional<T> is a
// field with omitempty whose Go type is *T, or T itself when T is already
// nil-able (JSON, []byte, a slice or a map); a required field has no
// omitempty, so that a zero value still travels.
func (c *conformance) checkField(where string, t typeExpr, f reflect.StructField) {
	optional := t.name == "optional"
	if optional {
		t = t.args[0]
	}
	if omit := hasOmitEmpty(f); omit != optional {
		if optional {
			c.errorf("%s: schema says %s, Go field %s has no omitempty", where, "optional<"+t.String()+">", f.Name)
		} else {
			c.errorf("%s: schema says required %s, Go field %s has omitempty", where, t, f.Name)
		}
	}
	got := f.Type
	if optional && !c.nilable(t) {
		if got.Kind() != reflect.Pointer {
			c.errorf("%s: Go type %v, want a pointer: *%s", where, got, c.describe(t))
			return
		}
		got = got.Elem()
	}
	if err := c.match(t, got); err != nil {
		c.errorf("%s: Go type %v does not match schema %s: %v", where, f.Type, t, err)
	}
}

// nilable reports whether the Go type of t can be absent without a pointer.
func (c *conformance) nilable(t typeExpr) bool {
	switch t.name {
	case "data", "list", "map":
		return true
	}
	st := c.s.byName[t.name]
	return st != nil && st.kind == kindAlias && aliasTypes[t.name] != nil && aliasTypes[t.name].Kind() == reflect.Slice
}

// match reports whether got is the Go type of the schema type t.
func (c *conformance) match(t typeExpr, got reflect.Type) error {
	want := func(w reflect.Type) error {
		if got != w {
			return fmt.Errorf("want %v", w)
		}
		return nil
	}
	switch t.name {
	case "str":
		return want(reflect.TypeFor[string]())
	case "bool":
		return want(reflect.TypeFor[bool]())
	case "u32":
		return want(reflect.TypeFor[uint32]())
	case "u64":
		return want(reflect.TypeFor[uint64]())
	case "i32":
		return want(reflect.TypeFor[int32]())
	case "data":
		return want(reflect.TypeFor[[]byte]())
	case "optional":
		return fmt.Errorf("optional<T> is only allowed as a field's outermost type")
	case "list":
		if got.Kind() != reflect.Slice || got.Name() != "" {
			return fmt.Errorf("want an unnamed slice []%s", c.describe(t.args[0]))
		}
		if err := c.match(t.args[0], got.Elem()); err != nil {
			return fmt.Errorf("element: %w", err)
		}
		return nil
	case "map":
		if got.Kind() != reflect.Map || got.Name() != "" {
			return fmt.Errorf("want an unnamed map[%s]%s", c.describe(t.args[0]), c.describe(t.args[1]))
		}
		if err := c.match(t.args[0], got.Key()); err != nil {
			return fmt.Errorf("key: %w", err)
		}
		if err := c.match(t.args[1], got.Elem()); err != nil {
			return fmt.Errorf("value: %w", err)
		}
		return nil
	}
	st := c.s.byName[t.name]
	if st == nil {
		return fmt.Errorf("schema type %s is undefined", t.name)
	}
	switch st.kind {
	case kindAlias:
		if a := aliasTypes[t.name]; a != nil {
			return want(a)
		}
		return fmt.Errorf("alias %s has no Go type", t.name)
	case kindEnum:
		if e, ok := enumTypes[t.name]; ok {
			return want(e.typ)
		}
		return fmt.Errorf("enum %s has no Go type", t.name)
	case kindStruct:
		if gt, ok := goStruct(t.name); ok {
			return want(gt)
		}
		return fmt.Errorf("struct %s is not a registered variant", t.name)
	case kindUnion:
		if u, ok := unionTypes[t.name]; ok {
			return want(u.field)
		}
		return fmt.Errorf("union %s has no Go interface", t.name)
	}
	return fmt.Errorf("schema type %s has unknown kind", t.name)
}

// describe spells the Go type the schema type t maps to, for messages.
func (c *conformance) describe(t typeExpr) string {
	switch t.name {
	case "str":
		return "string"
	case "u32":
		return "uint32"
	case "u64":
		return "uint64"
	case "i32":
		return "int32"
	case "data":
		return "[]byte"
	case "list":
		return "[]" + c.describe(t.args[0])
	case "map":
		return "map[" + c.describe(t.args[0]) + "]" + c.describe(t.args[1])
	case "optional":
		return "*" + c.describe(t.args[0])
	}
	if a := aliasTypes[t.name]; a != nil {
		return a.String()
	}
	if u, ok := unionTypes[t.name]; ok {
		return u.field.String()
	}
	return "events." + t.name
}

func (c *conformance) checkUnions() {
	for _, st := range c.s.types {
		if st.kind != kindUnion {
			continue
		}
		u, ok := unionTypes[st.name]
		if !ok {
			continue // reported by checkTypes
		}
		if u.iface.Kind() != reflect.Interface || u.iface.Name() != st.name || u.iface.PkgPath() != pkgPath {
			c.errorf("union %s: Go type %v, want interface events.%s", st.name, u.iface, st.name)
		}
		for _, m := range st.members {
			v, ok := events.NewVariant(m)
			if !ok {
				continue // the struct check reports it
			}
			if !reflect.TypeOf(v).Implements(u.iface) {
				c.errorf("union %s: member %s does not implement events.%s", st.name, m, st.name)
			}
		}
		if diff := cmp.Diff(st.members, events.UnionMembers[st.name]); diff != "" {
			c.errorf("events.UnionMembers[%q] differs from the schema's members in schema order (-schema +go):\n%s", st.name, diff)
		}
		// No Go type may claim membership the schema does not grant.
		for _, name := range events.VariantNames() {
			v, _ := events.NewVariant(name)
			if reflect.TypeOf(v).Implements(u.iface) && !slices.Contains(st.members, name) && extraMembers[st.name+"."+name] == "" {
				c.errorf("Go variant %s implements %s, but the schema's union %s does not list it", name, st.name, st.name)
			}
		}
	}
	for name := range events.UnionMembers {
		if st := c.s.byName[name]; st == nil || st.kind != kindUnion {
			c.errorf("events.UnionMembers lists %s, which is not a union of the schema", name)
		}
	}
}
