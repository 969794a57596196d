// Package eventlog reads and writes the JetStream side of the contract in
// package events: it appends to a session's log as its single writer, and
// reads records back by sequence. Package streams makes the streams it
// reads and writes.
//
// Writers: only the session service appends to ACP_LOG, through Writer. Every
// append is a compare-and-set on the last sequence of the session's subjects
// (acp.log.<ns>.<sid>.*), carries a Nats-Msg-Id unique to the writer and the
// position, and a multi-record append is one atomic batch. So a retried
// append is stored once, and a writer that lost ownership fails with
// events.CodeWriteConflict instead of forking the log.
//
// Readers: history pages and state rebuilds use direct gets (one request per
// page, not per record), which on a single replica are read-after-write.
package eventlog
