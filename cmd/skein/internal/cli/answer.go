package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventjson"
)

func (a *app) answerCommand() *cobra.Command {
	var c common
	cmd := &cobra.Command{
		Use:   "answer REQUEST_ID accept|decline|cancel [CONTENT]",
		Short: "Answer a pending input request",
		Long: `Answer the input request REQUEST_ID of the session (an agent's elicitation,
shown as an input_request event and in the session's state) and print
"accepted", or "not pending: REASON" when it was already answered or ended.
Both exit 0.

accept takes CONTENT, a JSON object with the fields of the agent's requested
schema, for example '{"name":"skein","count":3}'; decline and cancel take
none. Content that does not fit the schema (a wrong type, a value not in an
enum, a missing required field, a field it does not name) fails with
invalid_request and leaves the request pending.`,
		Args:         cobra.RangeArgs(2, 3),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := answerRequest{Action: args[1]}
			if len(args) == 3 {
				if args[1] != events.InputAccept {
					return fmt.Errorf("answer %s: content goes with accept only", args[0])
				}
				if !json.Valid([]byte(args[2])) {
					return fmt.Errorf("answer %s: content is not valid JSON", args[0])
				}
				req.Content = json.RawMessage(args[2])
			}
			cl, done := a.client(&c)
			defer done()
			resp, err := cl.answer(cmd.Context(), c.session, args[0], req)
			if err != nil {
				return fmt.Errorf("answer %s: %w", args[0], err)
			}
			_, err = fmt.Fprintln(a.stdout, describeAnswer(resp))
			return err
		},
	}
	c.register(cmd)
	return cmd
}

// answerRequest is the body of POST /v1/sessions/{id}/inputs/{requestId}.
type answerRequest struct {
	Action  string          `json:"action"`
	Content json.RawMessage `json:"content,omitempty"`
}

// answer sends the answer to input request requestID of session sid.
func (c *client) answer(ctx context.Context, sid, requestID string, req answerRequest) (*statusResponse, error) {
	return c.resolve(ctx, sid, "/inputs/", requestID, req)
}

// input prints an input event of a turn: the agent's question with the
// skein answer command that answers it, or how it ended.
func (p *printer) input(e *event) {
	if e.Type == eventjson.TypeInputRequest {
		p.line(fmt.Sprintf("[input] %s (request %s)", rawString(e.Message), e.RequestID))
		hint := "  answer: skein answer " + e.RequestID + " accept '<json object>' | decline | cancel"
		if p.session != "" && p.session != defaultSession {
			hint += " -s " + p.session
		}
		p.line(hint)
		return
	}
	detail := rawString(e.Action)
	if reason := rawString(e.Reason); reason != "" {
		detail += ", " + reason
	}
	p.line(fmt.Sprintf("[input] request %s: %s (%s)", e.RequestID, e.Status, detail))
}

// rawString returns raw JSON that is a string as the string, and "" for
// anything else.
func rawString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}
