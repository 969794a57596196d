package adapterrunner

import (
	"strconv"
	"strings"
	"testing"
)

func TestParsePorts(t *testing.T) {
	got, err := parsePorts([]string{"8080", "3000-3999", "1", "65535"})
	if err != nil {
		t.Fatal(err)
	}
	want := []portRange{{8080, 8080}, {3000, 3999}, {1, 1}, {65535, 65535}}
	if len(got) != len(want) {
		t.Fatalf("parsePorts = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("parsePorts[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"", "0", "65536", "-1", "80-", "-80", "90-80", "08080", "+80", "80 ", "1-2-3", "http"} {
		if _, err := parsePorts([]string{bad}); err == nil {
			t.Errorf("parsePorts(%q) accepted", bad)
		}
	}
}

// FuzzParsePorts: a bind list either parses into ordered ranges of real
// ports, whose ends are numbers the text holds, or is refused.
func FuzzParsePorts(f *testing.F) {
	for _, s := range []string{"8080", "3000-3999", "0", "1-65535", "9-1", "a-b", "80,90-91"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parsePorts(strings.Split(s, ","))
		if err != nil {
			return
		}
		for _, r := range got {
			if r[0] == 0 || r[0] > r[1] || !strings.Contains(s, strconv.Itoa(int(r[0]))) || !strings.Contains(s, strconv.Itoa(int(r[1]))) {
				t.Fatalf("parsePorts(%q) = %v", s, got)
			}
		}
	})
}

// A registry entry's bind list and limits are checked when the registry
// is read: a typo fails the runner's start, not an adapter's.
func TestRegistryChecksBindAndLimits(t *testing.T) {
	for name, a := range map[string]Agent{
		"bind":   {ID: "a", Command: "x", Sandbox: AgentSandbox{Bind: []string{"3000-"}}},
		"memory": {ID: "a", Command: "x", Limits: Limits{MemoryBytes: -1}},
		"pids":   {ID: "a", Command: "x", Limits: Limits{Pids: -5}},
		"cpu":    {ID: "a", Command: "x", Limits: Limits{CPUWeight: 10001}},
	} {
		if err := (Registry{Agents: []Agent{a}}).validate(); err == nil {
			t.Errorf("%s: %+v accepted", name, a)
		}
	}
	ok := Agent{ID: "a", Command: "x", Sandbox: AgentSandbox{Bind: []string{"3000-3999", "8080"}}, Limits: Limits{Pids: 10, CPUWeight: 1}}
	if err := (Registry{Agents: []Agent{ok}}).validate(); err != nil {
		t.Errorf("%+v: %v", ok, err)
	}
}
