package session

import (
	"encoding/json"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
)

// checkPromptCapabilities refuses a prompt that carries a content block
// its agent did not advertise. ACP lets a client send image, audio and
// embedded resource blocks only to an agent whose initialize said
// promptCapabilities.image, .audio or .embeddedContext
// (acp.PromptCapability); text and resource_link blocks always go.
// agentCaps is the agentCapabilities of the adapter the prompt would go
// to, as it reported them.
//
// The prompt path calls it once the session's adapter is attached and
// before anything of the prompt is appended: it reads what the process
// that would get the prompt advertised, not what an earlier one did (the
// agent may have been upgraded since), and a refused prompt leaves
// nothing in the log but that attach.
//
// An upload named by a skein-attachment: link is a resource_link here;
// the runner embeds it as a resource only for an agent that advertised
// embeddedContext (adapter-runner's attachments.go).
func checkPromptCapabilities(blocks []json.RawMessage, agentCaps events.JSON) error {
	caps := acp.ParsePromptCapabilities(agentCaps)
	for i, b := range blocks {
		var head struct {
			Type string `json:"type"`
		}
		// PromptBlocks accepted each block as an object with a type, read
		// as here: the same type the log will show.
		_ = json.Unmarshal(b, &head)
		if caps.Allows(head.Type) {
			continue
		}
		what := head.Type
		if what == acp.BlockResource {
			what = "embedded resource"
		}
		return events.Errorf(events.CodeUnsupportedContent, "content[%d]: the agent does not accept %s content (promptCapabilities.%s)",
			i, what, acp.PromptCapability(head.Type))
	}
	return nil
}
