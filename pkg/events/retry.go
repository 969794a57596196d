package events

import "fmt"

// Retry is what a client does with a request that failed with a code: the
// one rule docs/API.md states for every code, so that no client has to
// guess whether sending a request again is safe or useful.
type Retry int

const (
	// RetrySameKey: send the same request again, with the same
	// idempotency key for a prompt, after a pause (Retry-After when the
	// answer has one). Nothing was recorded, or the retry joins what was:
	// a keyed prompt that was accepted answers its turn, never a second.
	RetrySameKey Retry = iota + 1
	// PromptAgain: the turn was accepted, ran and ended with this code. A
	// retry with the same key answers this outcome again; to try once
	// more, prompt again with a new key (the session is usable).
	PromptAgain
	// GiveUp: the request is wrong, not allowed, or names what is not
	// there; it gets the same answer every time. Change it first.
	GiveUp
)

func (r Retry) String() string {
	switch r {
	case RetrySameKey:
		return "retry with the same key"
	case PromptAgain:
		return "prompt again with a new key"
	case GiveUp:
		return "give up"
	}
	return fmt.Sprintf("Retry(%d)", int(r))
}

// retries is the rule of every code in Codes. TestRetryRules fails on a
// code without one.
var retries = map[Code]Retry{
	// Bad input and access: the same request gets the same answer.
	CodeInvalidRequest:      GiveUp,
	CodeInvalidPayload:      GiveUp,
	CodeInvalidNamespace:    GiveUp,
	CodeInvalidSessionID:    GiveUp,
	CodeInvalidCursor:       GiveUp,
	CodePayloadTooLarge:     GiveUp,
	CodeUnknownAgent:        GiveUp,
	CodeIdempotencyConflict: GiveUp, // the key names another prompt: use a new key for this one
	CodeUnsupportedContent:  GiveUp, // the agent takes no such block: leave it out, or send it as text or a resource_link
	CodeUnauthenticated:     GiveUp,
	CodeForbidden:           GiveUp,

	// State.
	CodeSessionNotFound: GiveUp,
	CodeFileNotFound:    GiveUp,
	CodeNotQueued:       GiveUp,
	CodePromptDequeued:  GiveUp,
	CodeSessionConflict: GiveUp,
	// Nothing was recorded: once the running turn ends (its TurnFinished
	// in the log), the same prompt is accepted.
	CodeSessionBusy:   RetrySameKey,
	CodeCursorExpired: GiveUp, // read again from the oldest retained sequence, which the message names
	// The session is in use: discarding it never will succeed; delete it.
	CodeSessionNotEmpty: GiveUp,

	// Routing: the same request names the same missing route.
	CodeNotFound:         GiveUp,
	CodeMethodNotAllowed: GiveUp,
	// The same request asks for the same media types.
	CodeUnsupportedMediaType: GiveUp,
	CodeNotAcceptable:        GiveUp,
	// Nothing was done: once the stream's receiver goes, the same request
	// takes its place.
	CodeStreamBusy: RetrySameKey,

	// Turns and adapters: each is the outcome of a turn that was accepted
	// and ended, except for a placement that found no runner, which
	// recorded nothing.
	CodePromptDeliveryUncertain:     PromptAgain,
	CodeAgentUnavailable:            RetrySameKey, // once a runner has room
	CodeAgentNotInstalled:           RetrySameKey, // once a runner that has it is up
	CodeAdapterExited:               PromptAgain,  // the next prompt restores the agent
	CodeAdapterError:                PromptAgain,
	CodeAdapterProtocol:             PromptAgain,
	CodeLineTooLong:                 PromptAgain,
	CodePermissionPolicyUnsatisfied: GiveUp, // answer the requests yourself, or choose another policy
	CodeInvalidPermissionOption:     GiveUp,
	CodeMessageTooLarge:             PromptAgain,
	CodeTurnOutputTooLarge:          PromptAgain,
	CodeOutputLost:                  PromptAgain,
	CodeEdgeLinkLost:                PromptAgain, // once the runner is back
	CodeBudgetExhausted:             GiveUp,      // until the cap is raised (or, a daily cap, the UTC day ends)

	// The system: nothing was recorded (unavailable: a dependency is
	// starting, stopping or electing a leader; write_conflict: the
	// session moved between replicas), or the request's fate is unknown
	// (timeout), which a keyed retry resolves.
	CodeWriteConflict: RetrySameKey,
	CodeUnavailable:   RetrySameKey,
	CodeTimeout:       RetrySameKey,
	CodeRateLimited:   RetrySameKey,
	// A refused prompt recorded nothing; a starved turn ended: once
	// there is room, a new prompt runs.
	CodeStorageFull: PromptAgain,
	CodeInternal:    GiveUp, // a bug: the server log has it under the request ID
}

// Retry returns the code's rule, or 0 for a code outside the registry.
func (c Code) Retry() Retry { return retries[c] }
