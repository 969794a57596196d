package test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"skein.dev/internal/natstest"
)

// The runbook's line, with the nats CLI: nats sub --translate 'skein decode'
// prints each record on the tail as its JSON line.
func TestDecodeWithNatsCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the nats CLI and starts processes; skipped in -short")
	}
	natsCLI := buildNatsCLI(t)
	ns := natstest.Run(t, natstest.WithListen())
	st := startStack(t, ns, t.TempDir())
	const count = 4
	skein := skeinBin(t)
	cmd := exec.CommandContext(t.Context(), natsCLI, "--server", ns.ClientURL(), "sub", "acp.tail.default.>",
		"--translate", skein+" decode", "--count", strconv.Itoa(count))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := pollFor(t.Context(), "the nats CLI's subscription", func() bool { return hasSubscription(ns, "acp.tail.default.>") }); err != nil {
		t.Fatal(err)
	}
	openAndPrompt(t, st.url, "cli")
	if err := <-done; err != nil {
		t.Fatalf("nats sub: %v\n%s", err, out.String())
	}
	var records []string
	for l := range strings.SplitSeq(out.String(), "\n") {
		if !strings.HasPrefix(l, "{") {
			continue // natscli's own lines: "[#1] Received on ..."
		}
		var got struct {
			Record string `json:"record"`
			Agent  string `json:"agent"`
		}
		if err := json.Unmarshal([]byte(l), &got); err != nil || got.Record == "" {
			t.Errorf("nats sub --translate printed %q, want a record's JSON line", l)
		}
		if got.Record == "SessionOpened" && got.Agent != "test" {
			t.Errorf("SessionOpened agent = %q, want test: %s", got.Agent, l)
		}
		records = append(records, got.Record)
	}
	if len(records) != count || !strings.Contains(strings.Join(records, " "), "SessionOpened") {
		t.Errorf("nats sub --translate printed records %v, want %d with SessionOpened:\n%s", records, count, out.String())
	}
}

// hasSubscription reports whether a client of ns subscribes to subject.
func hasSubscription(ns *server.Server, subject string) bool {
	cz, err := ns.Connz(&server.ConnzOptions{Subscriptions: true})
	if err != nil {
		return false
	}
	for _, c := range cz.Conns {
		if slices.Contains(c.Subs, subject) {
			return true
		}
	}
	return false
}

func openAndPrompt(t *testing.T, base, sid string) {
	t.Helper()
	if code, b := do(t, http.MethodPut, base+"/v1/sessions/"+sid, `{"agent":"test"}`); code != http.StatusOK {
		t.Fatalf("PUT %s = %d %s", sid, code, b)
	}
	if code, b := do(t, http.MethodPost, base+"/v1/sessions/"+sid+"/prompt", promptBody("say hello")); code != http.StatusOK {
		t.Fatalf("prompt = %d %s", code, b)
	}
}
