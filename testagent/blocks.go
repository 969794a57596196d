package testagent

import (
	"bytes"
	"encoding/json"
)

// opBlocks reports the prompt's content blocks other than text, as the
// agent got them: one line "block <compact JSON>" each, in one agent
// message. A test of what Skein sends in a prompt (an attachment rewritten
// as a resource_link or an embedded resource) reads them back from the
// session's history.
const opBlocks opKind = "blocks"

// reports are the commands that report on the turn itself; turn.exec
// hands them here.
var reports = map[opKind]func(*turn){
	opBlocks: reportBlocks,
}

func init() {
	keywords[opBlocks] = parseNoArgs
}

func reportBlocks(t *turn) {
	var out bytes.Buffer
	for _, b := range t.blocks {
		var head struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(b, &head) != nil || head.Type == "text" {
			continue
		}
		out.WriteString("block ")
		if json.Compact(&out, b) != nil {
			out.Write(b)
		}
		out.WriteByte('\n')
	}
	if out.Len() == 0 {
		out.WriteString("no blocks\n")
	}
	t.chunk("agent_message_chunk", out.String())
}
