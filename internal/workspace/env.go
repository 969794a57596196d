package workspace

import (
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
// runner again when it launches the adapter (with its own registry).

// EnvAllowed reports whether name matches one of the allow patterns.
func EnvAllowed(allow []string, name string) bool {
	return slices.ContainsFunc(allow, func(pat string) bool {
		if prefix, ok := strings.CutSuffix(pat, "*"); ok {
			return strings.HasPrefix(name, prefix)
		}
		return pat == name
	})
}

// CheckEnv refuses an env holding a variable that agent's allow list does
// not name. It names the variables, never their values: values may be
// secrets, and an error is logged and returned to the client.
func CheckEnv(agent string, allow []string, env map[string]string) error {
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
