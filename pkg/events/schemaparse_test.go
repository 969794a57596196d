package events_test

import (
	"fmt"
	"strings"
)

// A parser for the schema language of testdata/agentos-protocol.schema,
// used by schema_test.go.

// The schema language: a header line "name version", then declarations
//
//	type X str                       an alias of a builtin
//	type X enum { A B C }
//	type X struct { name: T ... }    one field per name, on one line or many
//	type X union { A | B | C }       members are struct types
//
// with T one of str, bool, i32, u32, u64, data, a declared type, or the
// generics optional<T>, list<T> and map<K><V>. '#' starts a comment that
// runs to the end of the line.

type typeKind int

const (
	kindAlias typeKind = iota
	kindEnum
	kindStruct
	kindUnion
)

type schema struct {
	name, version string
	types         []*schemaType // in declaration order
	byName        map[string]*schemaType
}

type schemaType struct {
	name    string
	kind    typeKind
	line    int
	alias   typeExpr      // kindAlias
	values  []string      // kindEnum
	fields  []schemaField // kindStruct
	members []string      // kindUnion
}

type schemaField struct {
	name string
	typ  typeExpr
	line int
}

type typeExpr struct {
	name string
	args []typeExpr
}

func (t typeExpr) String() string {
	var s strings.Builder
	s.WriteString(t.name)
	for _, a := range t.args {
		s.WriteString("<" + a.String() + ">")
	}
	return s.String()
}

func (st *schemaType) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "type %s ", st.name)
	switch st.kind {
	case kindAlias:
		b.WriteString(st.alias.String())
	case kindEnum:
		b.WriteString("enum { " + strings.Join(st.values, " ") + " }")
	case kindStruct:
		b.WriteString("struct {")
		for _, f := range st.fields {
			fmt.Fprintf(&b, " %s: %s", f.name, f.typ)
		}
		b.WriteString(" }")
	case kindUnion:
		b.WriteString("union { " + strings.Join(st.members, " | ") + " }")
	}
	return b.String()
}

var builtinTypes = map[string]int{ // name → number of type arguments
	"str": 0, "bool": 0, "i32": 0, "u32": 0, "u64": 0, "data": 0,
	"optional": 1, "list": 1, "map": 2,
}

type schemaToken struct {
	text string
	line int
}

func tokenize(src string) ([]schemaToken, error) {
	var toks []schemaToken
	line := 1
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case strings.IndexByte("{}:|<>", c) >= 0:
			toks = append(toks, schemaToken{string(c), line})
			i++
		case isWordByte(c):
			j := i
			for j < len(src) && isWordByte(src[j]) {
				j++
			}
			toks = append(toks, schemaToken{src[i:j], line})
			i = j
		default:
			return nil, fmt.Errorf("line %d: unexpected %q", line, c)
		}
	}
	return toks, nil
}

func isWordByte(c byte) bool {
	return c == '_' || c == '.' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isIdent(s string) bool {
	if s == "" || '0' <= s[0] && s[0] <= '9' {
		return false
	}
	return !strings.ContainsAny(s, ".-")
}

type schemaParser struct {
	toks []schemaToken
	pos  int
}

func (p *schemaParser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos].text
	}
	return ""
}

func (p *schemaParser) line() int {
	if p.pos < len(p.toks) {
		return p.toks[p.pos].line
	}
	if len(p.toks) > 0 {
		return p.toks[len(p.toks)-1].line
	}
	return 1
}

func (p *schemaParser) next() string {
	s := p.peek()
	if p.pos < len(p.toks) {
		p.pos++
	}
	return s
}

func (p *schemaParser) expect(want string) error {
	if got := p.peek(); got != want {
		return fmt.Errorf("line %d: got %q, want %q", p.line(), got, want)
	}
	p.pos++
	return nil
}

func (p *schemaParser) ident(what string) (string, error) {
	line := p.line()
	s := p.next()
	if !isIdent(s) || strings.IndexByte("{}:|<>", s[0]) >= 0 {
		return "", fmt.Errorf("line %d: got %q, want %s", line, s, what)
	}
	return s, nil
}

func parseSchema(src string) (*schema, error) {
	toks, err := tokenize(src)
	if err != nil {
		return nil, err
	}
	p := &schemaParser{toks: toks}
	s := &schema{byName: map[string]*schemaType{}}
	if p.peek() != "type" && p.peek() != "" {
		s.name, s.version = p.next(), p.next()
		if s.name == "" || s.version == "" || s.version == "type" {
			return nil, fmt.Errorf("line 1: want a header \"name version\"")
		}
	}
	for p.peek() != "" {
		st, err := p.typeDecl()
		if err != nil {
			return nil, err
		}
		if _, dup := s.byName[st.name]; dup {
			return nil, fmt.Errorf("line %d: type %s declared twice", st.line, st.name)
		}
		s.byName[st.name] = st
		s.types = append(s.types, st)
	}
	return s, s.resolve()
}

func (p *schemaParser) typeDecl() (*schemaType, error) {
	if err := p.expect("type"); err != nil {
		return nil, err
	}
	st := &schemaType{line: p.line()}
	var err error
	if st.name, err = p.ident("a type name"); err != nil {
		return nil, err
	}
	switch p.peek() {
	case "enum":
		st.kind = kindEnum
		p.next()
		if err := p.expect("{"); err != nil {
			return nil, err
		}
		for p.peek() != "}" {
			v, err := p.ident("an enum value or '}'")
			if err != nil {
				return nil, err
			}
			st.values = append(st.values, v)
		}
		p.next()
	case "struct":
		st.kind = kindStruct
		p.next()
		if err := p.expect("{"); err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for p.peek() != "}" {
			f := schemaField{line: p.line()}
			if f.name, err = p.ident("a field name or '}'"); err != nil {
				return nil, err
			}
			if seen[f.name] {
				return nil, fmt.Errorf("line %d: %s.%s declared twice", f.line, st.name, f.name)
			}
			seen[f.name] = true
			if err := p.expect(":"); err != nil {
				return nil, err
			}
			if f.typ, err = p.typeExpr(); err != nil {
				return nil, err
			}
			st.fields = append(st.fields, f)
		}
		p.next()
	case "union":
		st.kind = kindUnion
		p.next()
		if err := p.expect("{"); err != nil {
			return nil, err
		}
		for {
			m, err := p.ident("a union member")
			if err != nil {
				return nil, err
			}
			st.members = append(st.members, m)
			if p.peek() != "|" {
				break
			}
			p.next()
		}
		if err := p.expect("}"); err != nil {
			return nil, err
		}
	default:
		st.kind = kindAlias
		if st.alias, err = p.typeExpr(); err != nil {
			return nil, err
		}
		if n, ok := builtinTypes[st.alias.name]; !ok || n != 0 {
			return nil, fmt.Errorf("line %d: %s: want enum, struct, union or a builtin scalar type, got %q", st.line, st.name, st.alias.name)
		}
	}
	return st, nil
}

func (p *schemaParser) typeExpr() (typeExpr, error) {
	name, err := p.ident("a type")
	if err != nil {
		return typeExpr{}, err
	}
	t := typeExpr{name: name}
	for p.peek() == "<" {
		p.next()
		arg, err := p.typeExpr()
		if err != nil {
			return typeExpr{}, err
		}
		if err := p.expect(">"); err != nil {
			return typeExpr{}, err
		}
		t.args = append(t.args, arg)
	}
	return t, nil
}

// resolve checks that every named type exists with the right arity and
// that unions list only structs.
func (s *schema) resolve() error {
	var check func(where string, t typeExpr) error
	check = func(where string, t typeExpr) error {
		want, builtin := builtinTypes[t.name]
		if !builtin {
			if s.byName[t.name] == nil {
				return fmt.Errorf("%s: undefined type %s", where, t.name)
			}
			want = 0
		}
		if len(t.args) != want {
			return fmt.Errorf("%s: %s takes %d type arguments, got %d", where, t.name, want, len(t.args))
		}
		for _, a := range t.args {
			if err := check(where, a); err != nil {
				return err
			}
		}
		return nil
	}
	for _, st := range s.types {
		switch st.kind {
		case kindStruct:
			for _, f := range st.fields {
				if err := check(fmt.Sprintf("line %d: %s.%s", f.line, st.name, f.name), f.typ); err != nil {
					return err
				}
			}
		case kindUnion:
			for _, m := range st.members {
				if mt := s.byName[m]; mt == nil || mt.kind != kindStruct {
					return fmt.Errorf("line %d: union %s: member %s is not a struct", st.line, st.name, m)
				}
			}
		}
	}
	return nil
}
