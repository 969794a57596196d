// Package acp is the vocabulary of the Agent Client Protocol (ACP v1) that
// Skein reads inside the payloads it carries: session update kinds, stop
// reasons, permission option kinds and outcomes, the content block types a
// prompt may carry by the agent's promptCapabilities, and the routing view of
// an update, of a session/update's params or of a permission request. It
// has no JSON-RPC: no envelopes, ids or method calls (that is
// pkg/acp/acpwire, which builds on this package and which only the
// adapter-runner uses). Payloads stay raw bytes; these functions read the
// few members a service routes on and never re-encode what they read.
//
// It also holds Skein's one byte-preserving reader and editor of JSON
// objects ([Lookup], [Members], [Member], [Elements], [StringValue],
// [WithoutMember], [WithMember]): whatever reads or changes one member of
// an agent's JSON uses them, pkg/acp/acpwire's JSON-RPC envelope included, so
// that every other byte stays as the agent wrote it. The contracts are at
// the top of json.go.
//
// It imports nothing of Skein, so any service may use it.
package acp
