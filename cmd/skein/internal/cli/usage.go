package cli

import (
	"encoding/json"
	"fmt"
)

// sessionUsage is a session's "usage": the agent's last report of the
// tokens in its context, its context window, and the session's cost when
// it gave one.
type sessionUsage struct {
	Used uint64 `json:"used"`
	Size uint64 `json:"size"`
	Cost *struct {
		Amount   json.Number `json:"amount"`
		Currency string      `json:"currency"`
	} `json:"cost"`
}

// usageField is the USAGE field of skein list: "USED/SIZE" tokens, then
// " AMOUNT CURRENCY" when the agent gave a cost; "-" when it reported no
// usage.
func usageField(u *sessionUsage) string {
	if u == nil {
		return "-"
	}
	s := fmt.Sprintf("%d/%d", u.Used, u.Size)
	if u.Cost != nil {
		s += " " + flat(u.Cost.Amount.String()+" "+u.Cost.Currency)
	}
	return s
}
