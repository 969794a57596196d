package errmap_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"testing"

	"skein.dev/pkg/events"
	"skein.dev/services/gateway/internal/errmap"
)

func TestTableCoversRegistry(t *testing.T) {
	for _, c := range events.Codes {
		e, ok := errmap.Lookup(c)
		if !ok {
			t.Errorf("Lookup(%q) = _, false, want a row in the table", c)
			continue
		}
		if e.Status < 400 || e.Status > 599 {
			t.Errorf("Lookup(%q).Status = %d, want a 4xx or 5xx status", c, e.Status)
		}
	}
}

func TestMap(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want errmap.Public
	}{
		{
			name: "not found passes through",
			err:  events.Errorf(events.CodeSessionNotFound, "no session x"),
			want: errmap.Public{Status: http.StatusNotFound, Code: events.CodeSessionNotFound, Message: "no session x"},
		},
		{
			name: "wrapped keeps its code",
			err:  fmt.Errorf("get session: %w", events.Errorf(events.CodeCursorExpired, "gone")),
			want: errmap.Public{Status: http.StatusGone, Code: events.CodeCursorExpired, Message: "gone"},
		},
		{
			name: "internal is masked",
			err:  events.Errorf(events.CodeInternal, "nil pointer in x.go:12"),
			want: errmap.Public{Status: http.StatusInternalServerError, Code: events.CodeInternal, Message: errmap.MaskedMessage, Masked: true},
		},
		{
			name: "invalid payload is masked",
			err:  events.Errorf(events.CodeInvalidPayload, "decode AcpPromptResponse: eof"),
			want: errmap.Public{Status: http.StatusInternalServerError, Code: events.CodeInternal, Message: errmap.MaskedMessage, Masked: true},
		},
		{
			name: "plain error is masked",
			err:  errors.New("dial tcp: refused"),
			want: errmap.Public{Status: http.StatusInternalServerError, Code: events.CodeInternal, Message: errmap.MaskedMessage, Masked: true},
		},
		{
			name: "unknown code is masked",
			err:  &events.Error{Code: "from_the_future", Message: "?"},
			want: errmap.Public{Status: http.StatusInternalServerError, Code: events.CodeInternal, Message: errmap.MaskedMessage, Masked: true},
		},
		{
			name: "timeout",
			err:  events.Errorf(events.CodeTimeout, "no reply"),
			want: errmap.Public{Status: http.StatusGatewayTimeout, Code: events.CodeTimeout, Message: "no reply"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errmap.Map(tt.err); got != tt.want {
				t.Errorf("Map(%v) = %+v, want %+v", tt.err, got, tt.want)
			}
		})
	}
}

// TestAPIDocListsEveryCode holds docs/API.md's table of error codes to the
// registry: every code has its row, with the status this table gives it
// and the retry rule pkg/events gives it, and the table names no other.
func TestAPIDocListsEveryCode(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (\\d{3}) \\| ([a-z ]+) \\| [^|]+\\|$")
	rows := map[events.Code][]string{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		c := events.Code(m[1])
		if _, dup := rows[c]; dup {
			t.Errorf("docs/API.md lists %q twice", c)
		}
		rows[c] = m[2:]
	}
	for _, c := range events.Codes {
		r, ok := rows[c]
		if !ok {
			t.Errorf("docs/API.md's table of error codes has no row for %q", c)
			continue
		}
		delete(rows, c)
		e, _ := errmap.Lookup(c)
		if want := strconv.Itoa(e.Status); r[0] != want {
			t.Errorf("docs/API.md: %q is %s, the gateway answers %s", c, r[0], want)
		}
		if want := c.Retry().String(); r[1] != want {
			t.Errorf("docs/API.md: %q says %q, its rule is %q", c, r[1], want)
		}
	}
	for c := range rows {
		t.Errorf("docs/API.md lists %q, which is not in the registry", c)
	}
}
