package main

import (
	"bytes"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"skein.dev/internal/natstest"
)

// skein log prints what the streams hold on a subject and ends: each
// record as skein decode prints it, or its headers; --since starts later;
// a subject of no stream is refused.
func TestLogCommand(t *testing.T) {
	ns := natstest.Run(t, natstest.WithListen())
	st := startStack(t, ns, t.TempDir())
	if code, b := do(t, http.MethodPut, st.url+"/v1/sessions/l1", `{"agent":"test"}`); code != http.StatusOK {
		t.Fatalf("PUT l1 = %d %s", code, b)
	}
	if code, b := do(t, http.MethodPost, st.url+"/v1/sessions/l1/prompt", promptBody("say logged")); code != http.StatusOK {
		t.Fatalf("prompt = %d %s", code, b)
	}
	skeinLog := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), append([]string{"log", "--nats", ns.ClientURL()}, args...), func(string) string { return "" }, strings.NewReader(""), &out, &errOut)
		return out.String(), errOut.String(), code
	}

	out, stderr, code := skeinLog("acp.log.default.l1.>")
	if code != 0 {
		t.Fatalf("skein log = %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	for _, want := range []string{`^\{"record":"SessionOpened"`, `^\{"record":"AdapterAttached"`, `"text":"logged"`, `^\{"record":"TurnFinished"`} {
		if !slices.ContainsFunc(lines, regexp.MustCompile(want).MatchString) {
			t.Errorf("skein log prints no line matching %s:\n%s", want, out)
		}
	}
	if !strings.HasPrefix(lines[0], `{"record":"SessionOpened"`) {
		t.Errorf("the first record is %s, want the session's opening", lines[0])
	}

	out, _, code = skeinLog("acp.io.default.l1.*", "--headers")
	if code != 0 || !regexp.MustCompile(`(?m)^\[#\d+\] acp\.io\.default\.l1\.\S+\nAcp-Process-Id: \S+\nAcp-Record: AdapterUpdate\nAcp-Record-No: 1\n`).MatchString(out) {
		t.Errorf("skein log --headers = %d:\n%s", code, out)
	}
	if strings.Contains(out, "Nats-Sequence:") {
		t.Errorf("skein log --headers prints the direct get's own headers:\n%s", out)
	}

	if out, _, code = skeinLog("acp.log.default.l1.>", "--since", "1h"); code != 0 || strings.Count(out, "\n") != len(lines) {
		t.Errorf("skein log --since 1h = %d, %d lines, want all %d:\n%s", code, strings.Count(out, "\n"), len(lines), out)
	}
	if out, _, code = skeinLog("acp.log.default.nobody.>"); code != 0 || out != "" {
		t.Errorf("skein log of a session with no records = %d %q, want 0 and nothing", code, out)
	}
	if _, stderr, code = skeinLog("acp.tail.default.>"); code == 0 || !strings.Contains(stderr, "--stream") {
		t.Errorf("skein log of a subject no stream stores = %d %q, want an error naming --stream", code, stderr)
	}
}
