package session

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"skein.dev/pkg/events"
)

// The agent's usage_update and available_commands_update are untrusted:
// what is cached of them is checked here against encoding/json, read
// independently, for every input the fuzzer finds.

func TestParseUsage(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want *events.SessionUsage
	}{
		{`{"sessionUpdate":"usage_update","used":0,"size":0}`, &events.SessionUsage{}},
		{`{"used":18446744073709551615,"size":1}`, &events.SessionUsage{Used: 1<<64 - 1, Size: 1}},
		{`{"used":1,"size":2,"cost":{"amount":-0.5e3,"currency":"credits","_meta":{"a":1}}}`,
			&events.SessionUsage{Used: 1, Size: 2, Cost: events.JSON(`{"amount":-0.5e3,"currency":"credits"}`)}},
		{`{"used":1,"size":2,"cost":{"amount":1,"currency":"US\u0044"}}`,
			&events.SessionUsage{Used: 1, Size: 2, Cost: events.JSON(`{"amount":1,"currency":"US\u0044"}`)}},
		{`{"used":1,"size":2,"cost":null}`, &events.SessionUsage{Used: 1, Size: 2}},
		{`{"used":1,"size":2,"cost":{"amount":"1","currency":"USD"}}`, &events.SessionUsage{Used: 1, Size: 2}},
		{`{"used":1,"size":2,"cost":{"amount":1}}`, &events.SessionUsage{Used: 1, Size: 2}},
		{`{"used":1,"size":2,"cost":{"amount":1,"currency":"` + string(bytes.Repeat([]byte("x"), 63)) + `"}}`, &events.SessionUsage{Used: 1, Size: 2}},
		{`{"used":1}`, nil},
		{`{"used":-1,"size":2}`, nil},
		{`{"used":1.0,"size":2}`, nil},
		{`{"used":1e2,"size":2}`, nil},
		{`{"used":"1","size":2}`, nil},
		{`{"used":18446744073709551616,"size":2}`, nil},
		{`{"used":1,"size":2,"used":3}`, nil},
		{`[1,2]`, nil},
		{`{"used":1,"size":2`, nil},
	} {
		got, ok := parseUsage([]byte(tc.in))
		if ok != (tc.want != nil) || !cmp.Equal(got, tc.want) {
			t.Errorf("parseUsage(%s) = %+v, %v; want %+v", tc.in, got, ok, tc.want)
		}
	}
}

func TestParseCommands(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{`{"sessionUpdate":"available_commands_update","availableCommands":[]}`, `[]`, true},
		{`{"availableCommands":[ {"name":"a","description":"b","input":{"hint":"h"}} , {"name":"c","description":""} ]}`,
			`[{"name":"a","description":"b","input":{"hint":"h"}},{"name":"c","description":""}]`, true},
		{`{"availableCommands":[{"name":"a"},{"name":"a","description":"d","name":"b"},7,null,{"name":"ok","description":"d"}]}`, `[{"name":"ok","description":"d"}]`, true},
		{`{"availableCommands":{"name":"a","description":"b"}}`, `[]`, true},
		{`{"availableCommands":null}`, `[]`, true},
		{`{"sessionUpdate":"available_commands_update"}`, `[]`, true},
		{`{"availableCommands":[],"availableCommands":[]}`, ``, false},
		{`[]`, ``, false},
		{`{"availableCommands":[`, ``, false},
	} {
		got, ok := parseCommands([]byte(tc.in))
		if ok != tc.ok || string(got) != tc.want {
			t.Errorf("parseCommands(%s) = %s, %v; want %s, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// topMembers returns the members of the JSON object in, in order, with
// repeats, as encoding/json reads them; ok is false when in is not one
// valid JSON object.
func topMembers(in []byte) (names []string, values []json.RawMessage, ok bool) {
	if !json.Valid(in) {
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, false
		}
		names, values = append(names, tok.(string)), append(values, v)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, false
	}
	return names, values, true
}

// member returns the value of the last member name, and how many there
// are.
func member(names []string, values []json.RawMessage, name string) (v json.RawMessage, n int) {
	for i, nm := range names {
		if nm == name {
			v, n = values[i], n+1
		}
	}
	return v, n
}

func FuzzParseUsage(f *testing.F) {
	for _, s := range []string{
		`{"used":1,"size":2,"cost":{"amount":0.42,"currency":"USD"}}`, `{"used":1,"size":2}`, `{"used":-1,"size":2}`,
		`{"used":1,"size":2,"cost":{"amount":1,"currency":"\u00e9","_meta":{}}}`, `{"us\u0065d":1,"size":2}`, `{"used":1,"size":2,"size":3}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, ok := parseUsage(in)
		names, values, valid := topMembers(in)
		if !valid {
			if ok {
				t.Fatalf("parseUsage(%q) = %+v for input that is not a JSON object", in, got)
			}
			return
		}
		used, nUsed := member(names, values, "used")
		size, nSize := member(names, values, "size")
		cost, nCost := member(names, values, "cost")
		var u, s uint64
		wantOK := nUsed == 1 && nSize == 1 && nCost <= 1 && json.Unmarshal(used, &u) == nil && json.Unmarshal(size, &s) == nil
		if ok != wantOK {
			t.Fatalf("parseUsage(%q) ok = %v, encoding/json says %v", in, ok, wantOK)
		}
		if !ok {
			return
		}
		if got.Used != u || got.Size != s {
			t.Fatalf("parseUsage(%q) = %d/%d, encoding/json reads %d/%d", in, got.Used, got.Size, u, s)
		}
		// The cost, as encoding/json reads it: an object whose amount is a
		// number and whose currency a string, each once and within bounds.
		cn, cv, cvalid := topMembers(cost)
		amount, nAmount := member(cn, cv, "amount")
		currency, nCurrency := member(cn, cv, "currency")
		var cur string
		wantCost := nCost == 1 && cvalid && nAmount == 1 && nCurrency == 1 &&
			len(amount) <= maxAmountBytes && (amount[0] == '-' || amount[0] >= '0' && amount[0] <= '9') &&
			len(currency) <= maxCurrencyBytes && currency[0] == '"' && json.Unmarshal(currency, &cur) == nil
		if (got.Cost != nil) != wantCost {
			t.Fatalf("parseUsage(%q) cost = %s; encoding/json says a cost: %v", in, got.Cost, wantCost)
		}
		if got.Cost == nil {
			return
		}
		var back struct {
			Amount   json.RawMessage `json:"amount"`
			Currency string          `json:"currency"`
		}
		if err := json.Unmarshal(got.Cost, &back); err != nil || !bytes.Equal(back.Amount, amount) || back.Currency != cur {
			t.Fatalf("parseUsage(%q) cost = %s, want amount %s and currency %q", in, got.Cost, amount, cur)
		}
	})
}

func FuzzParseCommands(f *testing.F) {
	for _, s := range []string{
		`{"availableCommands":[{"name":"a","description":"b","input":{"hint":"h"}},{"name":1},"x"]}`,
		`{"availableCommands":[{"name":"a","description":"b","name":"c"}]}`, `{"availableCommands":{}}`,
		`{"availableCommands":[],"availableCommands":[]}`, `{"available\u0043ommands":[{"name":"\u00e9","description":""}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, ok := parseCommands(in)
		names, values, valid := topMembers(in)
		if !valid {
			if ok {
				t.Fatalf("parseCommands(%q) = %s for input that is not a JSON object", in, got)
			}
			return
		}
		list, n := member(names, values, "availableCommands")
		if ok != (n <= 1) {
			t.Fatalf("parseCommands(%q) ok = %v with %d availableCommands", in, ok, n)
		}
		if !ok {
			return
		}
		var items []json.RawMessage
		if json.Unmarshal(list, &items) != nil {
			items = nil
		}
		var want []json.RawMessage
		for _, item := range items {
			in, iv, ivalid := topMembers(item)
			name, nName := member(in, iv, "name")
			description, nDescription := member(in, iv, "description")
			var s string
			if ivalid && nName == 1 && nDescription == 1 && name[0] == '"' && description[0] == '"' &&
				json.Unmarshal(name, &s) == nil && json.Unmarshal(description, &s) == nil {
				want = append(want, bytes.TrimSpace(item))
			}
		}
		var kept []json.RawMessage
		if err := json.Unmarshal(got, &kept); err != nil {
			t.Fatalf("parseCommands(%q) = %s, not a JSON array: %v", in, got, err)
		}
		if len(kept) != len(want) {
			t.Fatalf("parseCommands(%q) kept %d commands, encoding/json finds %d", in, len(kept), len(want))
		}
		for i := range kept {
			if !bytes.Equal(kept[i], want[i]) {
				t.Fatalf("parseCommands(%q) command %d = %s, want %s byte for byte", in, i, kept[i], want[i])
			}
		}
	})
}

// FuzzUsageCost: an agent's usage_update is untrusted. Its cost reads as a
// finite amount in a currency, or as none, and counting it never lowers a
// session's spend nor makes it other than finite.
func FuzzUsageCost(f *testing.F) {
	f.Add(`{"sessionUpdate":"usage_update","used":1,"size":2,"cost":{"amount":0.42,"currency":"USD"}}`, 0.1, 0.3)
	f.Add(`{"used":1,"size":2,"cost":{"amount":-1e3,"currency":"credits"}}`, 0.0, 0.0)
	f.Add(`{"used":1,"size":2,"cost":{"amount":1e999,"currency":"USD"}}`, 5.0, 1.0)
	f.Add(`{"used":1,"size":2,"cost":{"amount":"1","currency":"USD"}}`, 0.0, 0.0)
	f.Add(`{"used":1,"size":2,"cost":[]}`, 0.0, 0.0)
	f.Fuzz(func(t *testing.T, update string, spent, reported float64) {
		cost, ok := usageCost([]byte(update))
		if !ok {
			return
		}
		if math.IsNaN(cost.Amount) || math.IsInf(cost.Amount, 0) || cost.Currency == "" && !strings.Contains(update, `""`) {
			t.Fatalf("usageCost(%q) = %+v", update, cost)
		}
		if math.IsNaN(spent) || math.IsInf(spent, 0) || math.IsNaN(reported) || math.IsInf(reported, 0) || spent < 0 || reported < 0 {
			return
		}
		b := events.BudgetChanged{Spent: events.Money{Amount: spent, Currency: cost.Currency}, Reported: reported}
		next, foreign, ok := counted(b, cost)
		if foreign || !ok {
			return
		}
		if next.Spent.Amount < spent || math.IsNaN(next.Spent.Amount) || math.IsInf(next.Spent.Amount, 0) || next.Reported < 0 {
			t.Fatalf("counting %+v after %+v gave %+v", cost, b, next)
		}
	})
}
