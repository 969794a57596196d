package cli

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// What needs the user is the column after the status.
func TestPrintSessionAttention(t *testing.T) {
	for state, want := range map[string]string{
		`{"status":"idle"}`:    "s\tidle\t-\tT\t-\tA title\n",
		`{"status":"running"}`: "s\trunning\t-\tT\t-\tA title\n",
		`{"status":"waiting","requests":[{"requestId":"p1","request":{}}]}`:                                                                            "s\twaiting\t1 permission request\tT\t-\tA title\n",
		`{"status":"waiting","requests":[{"requestId":"p1","request":{}},{"requestId":"p2","request":{}}]}`:                                            "s\twaiting\t2 permission requests\tT\t-\tA title\n",
		`{"status":"failed","error":{"code":"adapter_exited","message":"x"}}`:                                                                          "s\tfailed\tfailed: adapter_exited\tT\t-\tA title\n",
		`{"status":"waiting","inputs":[{"requestId":"i1","request":{}}]}`:                                                                              "s\twaiting\t1 input request\tT\t-\tA title\n",
		`{"status":"waiting","requests":[{"requestId":"p1","request":{}}],"inputs":[{"requestId":"i1","request":{}},{"requestId":"i2","request":{}}]}`: "s\twaiting\t1 permission request, 2 input requests\tT\t-\tA title\n",
	} {
		raw := `{"sessionId":"s","updatedAt":"T","title":"A\n title","state":` + state + `}`
		var s listedSession
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := (&app{stdout: &out}).printSession(&out, &s, false, time.Now()); err != nil || out.String() != want {
			t.Errorf("state %s printed %q, %v; want %q", state, out.String(), err, want)
		}
	}
}
