package testagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The commands of this file send what an agent offers and what it costs:
// available_commands_update with a list the script gives, and usage_update
// with a cost (usage sends one without). Each is parsed into the update it
// sends, an update op, so it runs, bursts and is stored for session/load
// exactly as `update` with the same object would.
const (
	opCommands opKind = "commands"
	opCost     opKind = "cost"
)

func init() {
	keywords[opCommands] = parseCommandsOp
	keywords[opCost] = parseCostOp
}

// parseCommandsOp reads "[name[=description] | name[=description] ...]":
// an available_commands_update with those commands, in order, none when
// there are no arguments. A description defaults to the name; a command
// has no input.
func parseCommandsOp(o *op, args string) error {
	commands := []availableCommand{}
	if args != "" {
		for part := range strings.SplitSeq(args, "|") {
			name, description, ok := strings.Cut(strings.TrimSpace(part), "=")
			name, description = strings.TrimSpace(name), strings.TrimSpace(description)
			if name == "" || strings.ContainsFunc(name, isSpace) {
				return fmt.Errorf("want name[=description] | ..., got %q", part)
			}
			if !ok {
				description = name
			}
			commands = append(commands, availableCommand{Name: name, Description: description})
		}
	}
	return asUpdate(o, availableCommandsUpdate{SessionUpdate: "available_commands_update", AvailableCommands: commands})
}

// costUpdate is a usage_update with a cost.
type costUpdate struct {
	SessionUpdate string `json:"sessionUpdate"`
	Used          uint64 `json:"used"`
	Size          uint64 `json:"size"`
	Cost          struct {
		Amount   json.Number `json:"amount"`
		Currency string      `json:"currency"`
	} `json:"cost"`
}

// parseCostOp reads "<used> <size> <amount> <currency>": a usage_update
// whose cost is amount (a JSON number, sent as written) in currency.
func parseCostOp(o *op, args string) error {
	used, rest := cutWord(args)
	size, rest := cutWord(rest)
	amount, currency := cutWord(rest)
	var u costUpdate
	if err := parseUsage(o, used+" "+size); err != nil || currency == "" || strings.ContainsFunc(currency, isSpace) {
		return fmt.Errorf("want: cost <used> <size> <amount> <currency>, got %q", args)
	}
	var n json.Number
	if err := json.Unmarshal([]byte(amount), &n); err != nil {
		return fmt.Errorf("amount must be a JSON number, got %q", amount)
	}
	u.SessionUpdate, u.Used, u.Size = "usage_update", o.Used, o.Size
	u.Cost.Amount, u.Cost.Currency = n, currency
	return asUpdate(o, u)
}

// asUpdate makes o the update op that sends v.
func asUpdate(o *op, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return errors.New("cannot encode the update: " + err.Error())
	}
	o.Kind, o.Raw = opUpdate, raw
	return nil
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }
