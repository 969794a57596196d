package main

import (
	"flag"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	adapterrunner "skein.dev/services/adapter-runner"
)

// logConfig logs the effective configuration once, at start, at debug
// level: every flag of fs with the value it ended with (command line,
// environment or default), secrets redacted. It is the answer to "what is
// this process running with?" without reading its command line and
// environment. It is one line of thousands of characters, so info level
// gets a short start line instead, and --print-config prints it whole.
func logConfig(lg *slog.Logger, fs *flag.FlagSet) { logConfigWith(lg, fs, nil) }

// logConfigWith is logConfig with the values of the flags named in shown
// replacing theirs: a flag set by a function (flag.Func) has no value of
// its own to show, and a caller that filled in a field after parsing knows
// better than the flag.
func logConfigWith(lg *slog.Logger, fs *flag.FlagSet, shown map[string]string) {
	var attrs []any
	visitConfig(fs, shown, func(name, value string) {
		attrs = append(attrs, slog.String(name, value))
	})
	lg.Debug("effective configuration", slog.Group("config", attrs...))
}

// printConfig writes what logConfigWith logs to w, one flag a line as
// name=value, in the flags' order; a value that is empty or holds a space,
// a quote or a control character is quoted as Go quotes it.
func printConfig(w io.Writer, fs *flag.FlagSet, shown map[string]string) error {
	var b strings.Builder
	visitConfig(fs, shown, func(name, value string) {
		if value == "" || strings.ContainsFunc(value, func(r rune) bool {
			return r == ' ' || r == '"' || r == '\\' || !unicode.IsPrint(r)
		}) {
			value = strconv.Quote(value)
		}
		b.WriteString(name + "=" + value + "\n")
	})
	_, err := io.WriteString(w, b.String())
	return err
}

// visitConfig calls f with every flag of fs and its value, as shown
// replaces it, redacted.
func visitConfig(fs *flag.FlagSet, shown map[string]string, f func(name, value string)) {
	fs.VisitAll(func(fl *flag.Flag) {
		v, ok := shown[fl.Name]
		if !ok {
			v = fl.Value.String()
		}
		f(fl.Name, redactFlag(fl.Name, v))
	})
}

// printConfigUsage is the help of --print-config, in skein dev and serve.
const printConfigUsage = "print the effective configuration, every flag with its value (secrets redacted), one a line, and exit without starting"

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

// agentNames names the agents a runner offers at start, for the start
// line: the built-in ones, and the registry file that names the others.
func agentNames(c *adapterrunner.Config) string {
	var names []string
	for _, a := range c.Builtin {
		names = append(names, a.ID)
	}
	if c.AgentsFile != "" {
		names = append(names, "those of "+c.AgentsFile)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
