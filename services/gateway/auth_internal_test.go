package gateway

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

func TestParseTokens(t *testing.T) {
	good := HashToken("t")
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"one", `[{"sha256":"` + good + `","principal":"p","namespaces":["default","team"],"role":"user"}]`, true},
		{"none", `[]`, true},
		{"upper hex", `[{"sha256":"` + strings.ToUpper(good) + `","principal":"p","namespaces":["default"],"role":"read"}]`, true},
		{"not an array", `{}`, false},
		{"trailing data", `[] []`, false},
		{"unknown field", `[{"sha256":"` + good + `","principal":"p","namespaces":["default"],"role":"user","token":"t"}]`, false},
		{"short hash", `[{"sha256":"abcd","principal":"p","namespaces":["default"],"role":"user"}]`, false},
		{"not hex", `[{"sha256":"` + strings.Repeat("z", 64) + `","principal":"p","namespaces":["default"],"role":"user"}]`, false},
		{"no principal", `[{"sha256":"` + good + `","namespaces":["default"],"role":"user"}]`, false},
		{"no namespaces", `[{"sha256":"` + good + `","principal":"p","namespaces":[],"role":"user"}]`, false},
		{"bad namespace", `[{"sha256":"` + good + `","principal":"p","namespaces":["a.b"],"role":"user"}]`, false},
		{"namespace twice", `[{"sha256":"` + good + `","principal":"p","namespaces":["a","a"],"role":"user"}]`, false},
		{"bad role", `[{"sha256":"` + good + `","principal":"p","namespaces":["default"],"role":"root"}]`, false},
		{"same token twice", `[{"sha256":"` + good + `","principal":"p","namespaces":["default"],"role":"user"},{"sha256":"` + good + `","principal":"q","namespaces":["default"],"role":"read"}]`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTokens([]byte(tt.in))
			if (err == nil) != tt.ok {
				t.Fatalf("ParseTokens = %v, want ok %v", err, tt.ok)
			}
			if err != nil && strings.Contains(err.Error(), good) {
				t.Errorf("error %q quotes a hash", err)
			}
		})
	}
}

func TestTokenLookup(t *testing.T) {
	set, err := compileTokens([]Token{
		{SHA256: HashToken("a"), Principal: "pa", Namespaces: []string{"default"}, Role: RoleUser},
		{SHA256: HashToken("b"), Principal: "pb", Namespaces: []string{"x", "y"}, Role: RoleRead},
	})
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]string{"a": "pa", "b": "pb", "c": "", "": "", HashToken("a"): ""} {
		p := set.lookup(tok)
		got := ""
		if p != nil {
			got = p.name
		}
		if got != want {
			t.Errorf("lookup(%q) = %q, want %q", tok, got, want)
		}
	}
}

// FuzzParseTokens: a tokens file is untrusted input. Parsing never panics,
// and what it accepts is valid and survives a round trip.
func FuzzParseTokens(f *testing.F) {
	f.Add([]byte(`[{"sha256":"` + HashToken("t") + `","principal":"p","namespaces":["default","team"],"role":"admin"}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"sha256":"","principal":"","namespaces":null,"role":""}]`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tokens, err := ParseTokens(b)
		if err != nil {
			return
		}
		set, err := compileTokens(tokens)
		if err != nil {
			t.Fatalf("ParseTokens accepted what compileTokens refuses: %v", err)
		}
		for _, p := range set {
			if len(p.namespaces) == 0 || !p.namespaces[0].Valid() || p.name == "" {
				t.Fatalf("accepted an invalid principal %+v", p)
			}
		}
		again, err := json.Marshal(tokens)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseTokens(again)
		if err != nil {
			t.Fatalf("round trip: %v", err)
		}
		if len(tokens) > 0 && !reflect.DeepEqual(back, tokens) {
			t.Fatalf("round trip: %+v, want %+v", back, tokens)
		}
	})
}

// BenchmarkAuthorize is what authentication adds to every request: the
// header's parse, the token's hash, a constant-time pass over every entry
// and the namespace, for a set of a given size.
func BenchmarkAuthorize(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			tokens := make([]Token, n)
			for i := range tokens {
				tokens[i] = Token{SHA256: HashToken(fmt.Sprint("token-", i)), Principal: fmt.Sprint("p", i), Namespaces: []string{"default"}, Role: RoleUser}
			}
			a, err := newAuthenticator(AuthConfig{Tokens: tokens}, slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodPost, "/v1/sessions/s/prompt", nil)
			r.Header.Set("Authorization", "Bearer "+fmt.Sprint("token-", n-1))
			for b.Loop() {
				if _, err := a.authorize(r, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
