// Package turnwait waits for a prompt's turn to end, for Go callers on
// NATS (the gateway, skein's own client, tests).
//
// A prompt's caller does not hold a request through the turn. The prompt
// operation answers events.PromptAccepted, and Await (or Prompt, which does
// both) reads the session's control records after the acceptance until the
// turn's TurnFinished: subscribe to the tail first, then read, then dedupe
// by sequence.
package turnwait
