// Package rpc is how Skein's services serve and call the request API on
// NATS: nats micro services whose endpoints run each request to its end
// (Endpoints), a handler per op (OpHandler, ServeOp), replies in the
// contract's codec with errors from its one registry (Respond,
// RespondError), and the caller's side of the same (Request, Call,
// ReplyError).
//
// Errors travel in replies the nats micro way: the headers
// Nats-Service-Error-Code (the events.Code) and Nats-Service-Error (the
// message), and a body that is the events.Marshal form of
// events.AcpErrorResponse. A client turns them back into an *events.Error
// with ReplyError, so errors.Is works across the hop.
package rpc
