// Package acpwire is Skein's wire layer for the Agent Client Protocol: JSON-RPC
// 2.0 messages, one per '\n'-terminated line, exchanged with an ACP adapter
// process over its stdin and stdout. It owns the framing, the message
// codec, the JSON-RPC/ACP error codes and method names, and thin typed
// helpers for the client->agent methods. It knows nothing of NATS or of
// sessions as Skein stores them.
//
// It builds on skein.dev/pkg/acp, which holds what the services read as
// well: ACP's vocabulary (update kinds, stop reasons, permission option
// kinds and outcomes), the routing views of an update and of a permission
// option, and Skein's one byte-preserving JSON reader, which Parse and
// the helpers here read with.
//
// # Raw bytes are the payload
//
// ACP payloads travel through Skein as the exact bytes the adapter wrote.
// [Parse] decodes only the JSON-RPC envelope and hands out sub-slices of the
// line ([Message.Raw], ID, Params, Result, [RPCError.Data]); the typed
// helpers decode only routing fields ([Message.SessionUpdate],
// [ParseSessionUpdate], [ParsePermissionRequest], [SessionResult]) and
// keep the rest raw. Nothing
// is ever unmarshalled and marshalled again, so unknown fields, unknown
// sessionUpdate variants, unknown content types and _meta survive byte for
// byte. This is the point of the package: coder/acp-go-sdk drops unknown
// fields and mis-decodes unknown variants (REFERENCE.md §14).
//
// # Strict envelope, lenient contents
//
// The envelope must be JSON-RPC 2.0 ([Parse] lists what it rejects, with
// an [ErrProtocol] error). Inside params and results anything goes:
// unknown members and values are the normal case, not an error. Member
// names are matched exactly, and a routing member (jsonrpc, id, method,
// sessionId, ...) that appears twice is a protocol error, since decoders
// disagree on which of the two counts.
//
// # The connection contract
//
// A [Conn] has one reader goroutine, which is the only goroutine that runs
// callbacks, in stream order:
//
//   - notifications go to Options.OnNotification;
//   - agent->client requests go to Options.OnRequest, whose handler answers
//     later, from any goroutine, with [Conn.Respond] or [Conn.RespondError]
//     (without a handler, the reader answers -32601 itself);
//   - responses go to Options.OnResponse, then complete the matching call:
//     a blocked [Conn.Call] returns, or [Conn.CallAsync]'s done runs;
//   - lines that are not JSON-RPC go to Options.OnProtocolError and reading
//     continues.
//
// Because one goroutine handles lines in order, everything the agent wrote
// before a response (a prompt turn's session/update stream) has been
// handled when that response completes its call.
//
// Writes from any number of goroutines are serialized by one mutex; each
// message is a single '\n'-terminated line written with one Write.
//
// The connection ends at EOF, on a read error, on a line longer than
// Options.MaxLineBytes, or on [Conn.Close]. [Conn.Err] then says why
// ([ErrClosed] or [ErrLineTooLong]), writes fail with that error, calls
// still pending fail, and [Conn.Done] is closed once the reader has stopped.
//
// # Errors
//
// The package's own failures are *[Error] values, each wrapping one kind
// for errors.Is:
//
//   - [ErrProtocol]: the adapter wrote something that is not ACP (a line
//     Parse refuses, params or a result of the wrong shape). Reading goes
//     on.
//   - [ErrLineTooLong]: a line over Options.MaxLineBytes; the connection
//     has ended.
//   - [ErrClosed]: the connection is gone (EOF, a failed read or write,
//     Close). The cause, such as io.EOF or the write's error, is wrapped
//     too.
//   - [ErrInvalidArgument]: the caller passed a value that cannot be sent
//     (a raw value that is not valid JSON, a missing method, a bad id);
//     nothing was written.
//
// An agent's JSON-RPC error is an [*RPCError], which wraps none of these;
// a call abandoned through its context returns ctx.Err(). [IsUnknownSession]
// recognises the shapes real agents use to say a session does not exist.
//
// # Testing
//
// testdata/transcripts holds recorded traffic of real adapters (a copy of
// shared/acp/transcripts; the recorder cut some long lines short, and the
// golden file testdata/transcripts.golden records which). The tests replay
// it through Parse and through a real Conn; the fuzz targets are seeded from
// it.
package acpwire
