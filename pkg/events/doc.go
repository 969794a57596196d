// Package events is the contract every Skein service shares: the names on
// NATS (streams, KV buckets, subjects, headers), the identifiers that become
// subject tokens, the protocol types of the AgentOS ACP extension schema, the
// records of a session's log, the msgpack codec that carries all of them, and
// the one registry of error codes.
//
// Nothing in this package does I/O. Wire names are declared here and
// nowhere else: a service that spells "acp.log." inline is a bug. What is
// built on the contract lives beside it, one audience each: rpc (serving
// and calling the request API), eventlog (a session's log: the writer and
// the reads), streams (making the streams and buckets), eventjson (events
// as JSON for people), sessionstate (a session's state, derived from its
// log) and inputform (the form of an input request). Waiting for a turn
// is a client's: pkg/client/turnwait.
//
// # Wire format
//
// Every payload on the bus is one msgpack value produced by [Marshal]: a map
// {"v": 1, "type": <variant name>, "body": <the struct as a msgpack map>}.
// The variant name is the schema's type name (AcpPromptRequest) or, for
// Skein's own log records, the record name (TurnFinished). Struct fields are
// keyed by their schema names (camelCase); optional fields are omitted when
// absent. Fields of schema type JsonUtf8 are carried as msgpack bin holding
// the exact JSON bytes, never re-encoded. "v" is the codec version: a decoder
// rejects any version it does not know with [CodeInvalidPayload]. A breaking
// change to a variant is a new variant name, never a changed one.
package events
