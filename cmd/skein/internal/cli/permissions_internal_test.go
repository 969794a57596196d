package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	options := []permissionOption{{OptionID: "allow"}, {OptionID: "deny"}, {OptionID: "7"}}
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"1", "allow", true},
		{"2", "deny", true},
		{"3", "7", true},
		{"deny", "deny", true},
		{"7", "7", true}, // not a number in range: the option ID
		{"0", "", false},
		{"4", "", false},
		{"-1", "", false},
		{"Deny", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := choose(options, tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("choose(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	if got, ok := choose(nil, ""); ok {
		t.Errorf("choose(nil, \"\") = %q, true; want false", got)
	}
}

func TestIsTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "input"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, in := range map[string]io.Reader{"a regular file": f, "a pipe": r, "a strings.Reader": strings.NewReader("1\n")} {
		if isTerminal(in) {
			t.Errorf("isTerminal(%s) = true, want false", name)
		}
	}
	// A character device, as a terminal is.
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Skipf("no %s: %v", os.DevNull, err)
	}
	defer null.Close()
	if !isTerminal(null) {
		t.Errorf("isTerminal(%s) = false, want true (a character device)", os.DevNull)
	}
}
