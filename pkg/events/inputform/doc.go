// Package inputform reads the form of an input request: the requested
// schema of an ACP form elicitation (elicitation/create), which the runner
// checks when an agent asks (Parse), and the session service checks a
// person's answer against (Schema.Check). ACP allows a flat object of
// primitive properties; anything Skein cannot check answers against is
// refused as the agent's protocol error.
package inputform
