package session

import (
	"testing"

	"skein.dev/pkg/events"
)

func TestInputResponseJSON(t *testing.T) {
	for _, tc := range []struct {
		action, content, want string
	}{
		{"accept", "{ \"a\" : 1.50,\n\"b\":[\"x\"] }", `{"action":"accept","content":{"a":1.50,"b":["x"]}}`},
		{"accept", "", `{"action":"accept"}`},
		{"decline", "", `{"action":"decline"}`},
		{"cancel", "", `{"action":"cancel"}`},
	} {
		if got := string(inputResponseJSON(tc.action, events.JSON(tc.content))); got != tc.want {
			t.Errorf("inputResponseJSON(%s, %s) = %s, want %s", tc.action, tc.content, got, tc.want)
		}
	}
}
