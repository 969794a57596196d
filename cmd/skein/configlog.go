package main

import (
	"flag"
	"log/slog"
	"net/url"
	"strings"
)

// logConfig logs the effective configuration once, at start: every flag of
// fs with the value it ended with (command line, environment or default),
// secrets redacted. It is the answer to "what is this process running
// with?" without reading its command line and environment.
func logConfig(lg *slog.Logger, fs *flag.FlagSet) { logConfigWith(lg, fs, nil) }

// logConfigWith is logConfig with the values of the flags named in shown
// replacing theirs: a flag set by a function (flag.Func) has no value of
// its own to show, and a caller that filled in a field after parsing knows
// better than the flag.
func logConfigWith(lg *slog.Logger, fs *flag.FlagSet, shown map[string]string) {
	var attrs []any
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := shown[f.Name]
		if !ok {
			v = f.Value.String()
		}
		attrs = append(attrs, slog.String(f.Name, redactFlag(f.Name, v)))
	})
	lg.Info("effective configuration", slog.Group("config", attrs...))
}

// secretWords mark flags whose value is a secret: never logged.
var secretWords = []string{"token", "secret", "password", "passwd", "creds", "credential", "key", "seed"}

// redactFlag returns value fit for a log: "[redacted]" for a secret flag
// (other than a file path, which is not the secret itself), and a URL's
// password replaced.
func redactFlag(name, value string) string {
	if value == "" {
		return value
	}
	lower := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(lower, w) && !strings.HasSuffix(lower, "-file") && !strings.HasSuffix(lower, "creds") {
			return "[redacted]"
		}
	}
	if strings.Contains(value, "://") {
		var out []string
		for part := range strings.SplitSeq(value, ",") {
			if u, err := url.Parse(part); err == nil && u.User != nil {
				part = u.Redacted()
			}
			out = append(out, part)
		}
		return strings.Join(out, ",")
	}
	return value
}
