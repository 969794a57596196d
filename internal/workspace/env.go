package workspace

import (
	"fmt"
	"slices"
	"strings"

	"skein.dev/pkg/events"
)

// The environment a session may give its agent. The agents registry lists,
// per agent, the variables a session may set (allowEnv): a name, or a
// prefix ending in "*" ("MY_*"). A session's env holding any other name is
// refused with CodeInvalidRequest; an agent that lists none takes no env
// from sessions at all. Like the paths, the session service checks this
// when the session is opened (with the lists the runners publish) and the
// runner again when it launches the adapter (with its own registry). The
// session service applies ValidEnv at open whatever the agent, even one
// no runner has published yet.

// EnvAllowed reports whether name matches one of the allow patterns.
func EnvAllowed(allow []string, name string) bool {
	return slices.ContainsFunc(allow, func(pat string) bool {
		if prefix, ok := strings.CutSuffix(pat, "*"); ok {
			return strings.HasPrefix(name, prefix)
		}
		return pat == name
	})
}

// ValidEnv refuses, with CodeInvalidRequest, an env no process can be
// given: a name that is empty or holds "=" or a NUL, or a value that holds
// a NUL. The kernel takes an environment as NUL-terminated "name=value"
// strings, so such a variable would either change meaning on the way
// (A=B=c is A set to B=c) or fail every launch of the adapter, for good,
// after the session was recorded. Like CheckEnv it names variables, never
// values.
func ValidEnv(env map[string]string) error {
	var bad []string
	for name, value := range env {
		if name == "" || strings.ContainsAny(name, "=\x00") || strings.ContainsRune(value, 0) {
			bad = append(bad, fmt.Sprintf("%q", trunc(name)))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	if len(bad) > 10 {
		bad = append(bad[:10], "…")
	}
	return events.Errorf(events.CodeInvalidRequest, "env %s: a name must be non-empty without = or NUL, and a value without NUL", strings.Join(bad, ", "))
}

// CheckEnv refuses an env ValidEnv refuses, or holding a variable that
// agent's allow list does not name. It names the variables, never their
// values: values may be secrets, and an error is logged and returned to
// the client.
func CheckEnv(agent string, allow []string, env map[string]string) error {
	if err := ValidEnv(env); err != nil {
		return err
	}
	var refused []string
	for name := range env {
		if !EnvAllowed(allow, name) {
			refused = append(refused, name)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	slices.Sort(refused)
	for i, n := range refused {
		refused[i] = trunc(n)
	}
	if len(refused) > 10 {
		refused = append(refused[:10], "…")
	}
	return events.Errorf(events.CodeInvalidRequest, "agent %s does not let a session set env %s (its allowEnv in the agents registry)", agent, strings.Join(refused, ", "))
}
