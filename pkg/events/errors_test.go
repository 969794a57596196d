package events_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// TestCodesUnique is nats-server's checkDupes: a code listed twice is a
// copy-paste slip that would make two failures indistinguishable.
func TestCodesUnique(t *testing.T) {
	seen := map[events.Code]int{}
	for i, c := range events.Codes {
		if j, dup := seen[c]; dup {
			t.Errorf("Codes[%d] = %q duplicates Codes[%d]", i, c, j)
		}
		seen[c] = i
	}
}

var codeRE = regexp.MustCompile(`^[a-z][a-z_]*$`)

func TestCodeFormat(t *testing.T) {
	for _, c := range events.Codes {
		if !codeRE.MatchString(string(c)) {
			t.Errorf("code %q does not match %s", c, codeRE)
		}
	}
}

// TestCodesComplete parses errors.go: every constant of type Code must be
// in Codes, and Codes must hold nothing else.
func TestCodesComplete(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []events.Code
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok {
					t.Errorf("%s: value is not a string literal", name.Name)
					continue
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				declared = append(declared, events.Code(s))
			}
		}
	}
	if len(declared) == 0 {
		t.Fatal("found no Code constants in errors.go")
	}
	for _, c := range declared {
		if !slices.Contains(events.Codes, c) {
			t.Errorf("Code %q is declared in errors.go but missing from Codes", c)
		}
	}
	for _, c := range events.Codes {
		if !slices.Contains(declared, c) {
			t.Errorf("Codes lists %q, which errors.go does not declare as a constant", c)
		}
	}
}

func TestCodeKnown(t *testing.T) {
	tests := []struct {
		code events.Code
		want bool
	}{
		{events.CodeSessionNotFound, true},
		{events.CodeInternal, true},
		{"", false},
		{"session_not_found_", false},
		{"SESSION_NOT_FOUND", false},
	}
	for _, tt := range tests {
		if got := tt.code.Known(); got != tt.want {
			t.Errorf("Code(%q).Known() = %v, want %v", tt.code, got, tt.want)
		}
	}
}

// TestErrorIsAcrossTheWire: an *Error sent as AcpErrorResponse and decoded
// in another process still matches its sentinel, and only that one.
func TestErrorIsAcrossTheWire(t *testing.T) {
	sent := events.Errorf(events.CodeSessionNotFound, "session %q in %q", "s1", "ns")
	b := mustMarshal(t, sent.Response())
	er, err := events.Decode[events.AcpErrorResponse](b)
	if err != nil {
		t.Fatalf("Decode[AcpErrorResponse] = %v", err)
	}
	got := error(&events.Error{Code: events.Code(er.Code), Message: er.Message})
	wrapped := fmt.Errorf("get session: %w", got)

	for _, err := range []error{got, wrapped} {
		if !errors.Is(err, events.ErrSessionNotFound) {
			t.Errorf("errors.Is(%v, ErrSessionNotFound) = false, want true", err)
		}
		if !errors.Is(err, &events.Error{Code: events.CodeSessionNotFound}) {
			t.Errorf("errors.Is(%v, &Error{Code: session_not_found}) = false, want true", err)
		}
		if errors.Is(err, events.ErrSessionBusy) {
			t.Errorf("errors.Is(%v, ErrSessionBusy) = true, want false", err)
		}
		if errors.Is(err, io.EOF) {
			t.Errorf("errors.Is(%v, io.EOF) = true, want false", err)
		}
	}
	if got.Error() != sent.Error() {
		t.Errorf("decoded error text = %q, want %q", got.Error(), sent.Error())
	}
}

func TestAsError(t *testing.T) {
	own := events.Errorf(events.CodeCursorExpired, "cursor 7")
	tests := []struct {
		name string
		in   error
		want *events.Error
		same bool // AsError must return own itself
	}{
		{"nil", nil, nil, false},
		{"an *Error", own, own, true},
		{"wrapped *Error", fmt.Errorf("read history: %w", own), own, true},
		{"joined", errors.Join(io.EOF, own), own, true},
		{"plain error", io.ErrUnexpectedEOF, &events.Error{Code: events.CodeInternal, Message: io.ErrUnexpectedEOF.Error()}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := events.AsError(tt.in)
			if tt.same && got != tt.want {
				t.Errorf("AsError(%v) = %p, want the wrapped error %p", tt.in, got, tt.want)
			}
			switch {
			case got == nil && tt.want == nil:
			case got == nil || tt.want == nil || *got != *tt.want:
				t.Errorf("AsError(%v) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

// TestReplyError decodes error replies the way a client sees them from a
// nats micro service, without a server.
func TestReplyError(t *testing.T) {
	body := mustMarshal(t, events.Errorf(events.CodeSessionBusy, "turn t1 is running").Response())
	tests := []struct {
		name     string
		msg      *nats.Msg
		wantCode events.Code // "" means no error
		wantMsg  string
	}{
		{"no error", &nats.Msg{Header: nats.Header{}, Data: []byte("x")}, "", ""},
		{"no header at all", &nats.Msg{Data: []byte("x")}, "", ""},
		{
			"error with body",
			&nats.Msg{Header: nats.Header{micro.ErrorCodeHeader: {"session_busy"}, micro.ErrorHeader: {"busy"}}, Data: body},
			events.CodeSessionBusy, "turn t1 is running",
		},
		{
			// A reply from something that is not an events service: the
			// headers still carry the code.
			"error without body",
			&nats.Msg{Header: nats.Header{micro.ErrorCodeHeader: {"unavailable"}, micro.ErrorHeader: {"down"}}},
			events.CodeUnavailable, "down",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := rpc.ReplyError(tt.msg)
			if tt.wantCode == "" {
				if err != nil {
					t.Errorf("ReplyError = %v, want nil", err)
				}
				return
			}
			e, ok := err.(*events.Error)
			if !ok {
				t.Fatalf("ReplyError = %T %v, want *events.Error", err, err)
			}
			if e.Code != tt.wantCode || e.Message != tt.wantMsg {
				t.Errorf("ReplyError = %q %q, want %q %q", e.Code, e.Message, tt.wantCode, tt.wantMsg)
			}
			if !errors.Is(err, &events.Error{Code: tt.wantCode}) {
				t.Errorf("errors.Is(ReplyError, code %s) = false", tt.wantCode)
			}
		})
	}
}

// TestRetryRules: every code says what a client does with it, and
// unavailable, which a client retries with the same key, is never a turn's
// outcome.
func TestRetryRules(t *testing.T) {
	for _, c := range events.Codes {
		switch r := c.Retry(); r {
		case events.RetrySameKey, events.PromptAgain, events.GiveUp:
		default:
			t.Errorf("code %q has no retry rule (%v): add it to retries in retry.go and to docs/API.md", c, r)
		}
	}
	if r := events.Code("no_such_code").Retry(); r != 0 {
		t.Errorf("a code outside the registry has rule %v", r)
	}
	for _, c := range []events.Code{events.CodeUnavailable, events.CodeWriteConflict, events.CodeTimeout} {
		if c.Retry() != events.RetrySameKey {
			t.Errorf("%s: nothing was recorded or a keyed retry joins it, so its rule is %v, not %v", c, events.RetrySameKey, c.Retry())
		}
	}
}
