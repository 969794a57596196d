package testagent

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseOffers(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" for a script error
	}{
		{"commands", `{"sessionUpdate":"available_commands_update","availableCommands":[]}`},
		{"/commands review=Review the code | test", `{"sessionUpdate":"available_commands_update","availableCommands":[` +
			`{"name":"review","description":"Review the code","input":null},{"name":"test","description":"test","input":null}]}`},
		{"commands a=b=c", `{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"a","description":"b=c","input":null}]}`},
		{"commands a | | b", ""},
		{"commands two words=x", ""},
		{"cost 1 2 0.42 USD", `{"sessionUpdate":"usage_update","used":1,"size":2,"cost":{"amount":0.42,"currency":"USD"}}`},
		{"cost 1 2 -1e3 credits", `{"sessionUpdate":"usage_update","used":1,"size":2,"cost":{"amount":-1e3,"currency":"credits"}}`},
		{"cost 1 2 0.42", ""},
		{"cost 1 2 x USD", ""},
		{"cost -1 2 1 USD", ""},
		{"cost 1 2 1 U S D", ""},
	} {
		ops, err := parseScript(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("parseScript(%q) = %+v, want a script error", tc.in, ops)
			}
			continue
		}
		if err != nil || len(ops) != 1 || ops[0].Kind != opUpdate || string(ops[0].Raw) != tc.want {
			t.Errorf("parseScript(%q) = %+v, %v; want one update %s", tc.in, ops, err, tc.want)
		}
	}
}

// FuzzParseOffers: what commands and cost accept is one update of their
// kind, valid JSON.
func FuzzParseOffers(f *testing.F) {
	for _, s := range []string{"commands a=b | c", "commands", "cost 1 2 0.5 USD", "cost 1 2 \"1\" USD", "commands \xff=\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.Contains(line, "\n") {
			return
		}
		ops, err := parseScript(line)
		if err != nil || len(ops) != 1 || ops[0].Kind == opEcho {
			return
		}
		kw, _ := splitKeyword(strings.TrimSpace(line))
		want := map[string]string{"commands": "available_commands_update", "cost": "usage_update"}[kw]
		if want == "" {
			return
		}
		var u struct {
			SessionUpdate string `json:"sessionUpdate"`
		}
		if ops[0].Kind != opUpdate || json.Unmarshal(ops[0].Raw, &u) != nil || u.SessionUpdate != want {
			t.Fatalf("parseScript(%q) = %+v, want one %s update", line, ops[0], want)
		}
	})
}
