package main

import (
	"bytes"
	"flag"
	"log/slog"
	"strings"
	"testing"
)

func TestRedactFlag(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"gateway.token", "s3cr3t", "[redacted]"},
		{"gateway.api-key", "abc", "[redacted]"},
		{"gateway.tokens-file", "/etc/skein/tokens", "/etc/skein/tokens"},
		{"nats-creds", "/etc/nats/user.creds", "/etc/nats/user.creds"},
		{"nats", "nats://alice:pw@a:4222,nats://b:4222", "nats://alice:xxxxx@a:4222,nats://b:4222"},
		{"session.owner-ttl", "15s", "15s"},
		{"gateway.token", "", ""},
	} {
		if got := redactFlag(tc.name, tc.value); got != tc.want {
			t.Errorf("redactFlag(%q, %q) = %q, want %q", tc.name, tc.value, got, tc.want)
		}
	}
}

func TestLogConfigOnceRedacted(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("gateway.token", "", "")
	fs.String("nats", "", "")
	if err := fs.Parse([]string{"-gateway.token", "hunter2", "-nats", "nats://u:pw@h:4222"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	logConfig(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})), fs) // it logs at debug level
	s := out.String()
	if strings.Count(s, "effective configuration") != 1 || strings.Contains(s, "hunter2") || strings.Contains(s, ":pw@") {
		t.Errorf("logConfig wrote %q: want one line, no secret", s)
	}
	if !strings.Contains(s, "config.nats=nats://u:xxxxx@h:4222") {
		t.Errorf("logConfig wrote %q: want the redacted NATS URL", s)
	}
}
