package history

import (
	"testing"
	"time"
)

// FuzzListCursor: a client's cursor is untrusted. What parses prints back
// to a cursor that parses the same; nothing panics.
func FuzzListCursor(f *testing.F) {
	f.Add((&listCursor{updated: time.Unix(1764583200, 123456789), sid: "s1"}).String())
	f.Add("l1")
	f.Add("l1AAAAAAAAAAAA")
	f.Add("x")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseListCursor(s)
		if err != nil {
			return
		}
		again, err := parseListCursor(c.String())
		if err != nil || !again.updated.Equal(c.updated) || again.sid != c.sid {
			t.Errorf("cursor %q parses to %+v, whose String %q parses to %+v, %v", s, c, c.String(), again, err)
		}
	})
}
