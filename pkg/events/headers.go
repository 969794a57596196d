package events

// Header names. NATS headers are case-sensitive: always use these constants.
// JetStream's own headers (Nats-Msg-Id, Nats-Expected-Last-Subject-Sequence,
// Nats-Sequence, ...) come from nats.go's jetstream package.
const (
	// HeaderRecord names the variant of the payload (AcpDurableSessionUpdate,
	// TurnFinished, ...) on every log and IO record, so `nats stream view`
	// shows what a record is without decoding it.
	HeaderRecord = "Acp-Record"
	// HeaderEventNo is the contiguous per-session number of a public event
	// (LogEvents records only), starting at 1. A reader that sees it jump
	// knows history was pruned.
	HeaderEventNo = "Acp-Event-No"
	// HeaderEventBytes is, on a public event, the running total of the
	// session's public event payload bytes up to it: what a session retains
	// is two reads, and its writer prunes by it (eventlog.Retention).
	HeaderEventBytes = "Acp-Event-Bytes"
	// HeaderTurnID names the turn a record belongs to. Every record
	// appended while a turn runs carries it.
	HeaderTurnID = "Acp-Turn-Id"
	// HeaderTurnAccepted marks the record that accepts a turn: the first
	// user-message event of the prompt. Its value is the prompt's number of
	// content blocks; the other blocks' events follow in the same atomic
	// append, so acceptance is never partial.
	HeaderTurnAccepted = "Acp-Turn-Accepted"
	// HeaderTurnBlock is, on each other event of an accepting append, the
	// block's index in the prompt (1, 2, ...): an atomic append stores
	// consecutive sequences, so the accepting record is this one's less it.
	HeaderTurnBlock = "Acp-Turn-Block"
	// HeaderTurnStart, on every record of a turn after its acceptance, is
	// the sequence of the accepting record: where a new owner finds the
	// turn's idempotency key and content hash in one read.
	HeaderTurnStart = "Acp-Turn-Start"
	// HeaderPart numbers the records of one flush of adapter output from
	// 0, so two identical pieces are not taken for one stored twice.
	HeaderPart = "Acp-Part"
	// HeaderContentHash (hex SHA-256 of the canonical prompt content) and
	// HeaderIdempotencyKey ride on the accepting record.
	HeaderContentHash    = "Acp-Content-Hash"
	HeaderIdempotencyKey = "Acp-Idempotency-Key"
	// HeaderIOSeq is the ACP_IO position of the adapter message whose
	// handling produced a log record: where a new owner resumes ACP_IO. It
	// is the runner record's stream sequence ("1234"), and for an update of
	// an AdapterUpdates record, the update's number there after a dot, from
	// 1 ("1234.3"): the updates after it are still to be applied.
	HeaderIOSeq = "Acp-Io-Seq"
	// HeaderIOResume, beside HeaderIOSeq (and on a turn's accepting
	// record), tells a new owner where to resume the adapter process's
	// records, which the owner applies in record-number order
	// (HeaderRecordNo) although the stream may store them out of it:
	// "<from> <applied>[ <held>]". from is an ACP_IO sequence at or before
	// every record of the process not yet applied; applied is the last
	// update applied and held the first chunk held in memory, by record
	// number ("17", or "17.3" for the third update of record number 17;
	// applied "0": none yet). A takeover resumes only from it.
	HeaderIOResume = "Acp-Io-Resume"
	// HeaderPrincipal, on a session API request, names the principal the
	// gateway authenticated (its token's name; none counts as ""), whose
	// adapter quota it uses. On a log record, it names who caused it.
	HeaderPrincipal = "Acp-Principal"
	// HeaderEvict, on an unloadSession request, makes it an eviction for
	// the cause it names (capacity, namespace_quota, principal_quota): the
	// owner unloads only an idle session (UnloadEvicted), else session_busy.
	HeaderEvict = "Acp-Evict"
	// HeaderNamespace and HeaderSessionID address a session on runner
	// control requests.
	HeaderNamespace = "Acp-Namespace"
	HeaderSessionID = "Acp-Session-Id"
	// HeaderProcessID names the adapter process a runner record came from.
	HeaderProcessID = "Acp-Process-Id"
	// HeaderRecordNo numbers one adapter process's ACP_IO records 1, 2, ...
	// as published, mostly unacknowledged: a gap is a record never stored.
	HeaderRecordNo = "Acp-Record-No"
	// HeaderAfterSequence is set on live deltas: the latest durable sequence
	// of the session when the delta was published.
	HeaderAfterSequence = "Acp-After-Sequence"
)

// Chunked replies (chunks.go). A requester that can reassemble a reply
// sent in several messages says so with HeaderAcceptChunks ("1") on its
// request; a reply larger than one NATS message carries is then sent in
// chunks, each with HeaderChunk "<i>/<n>" (i from 1 to n, in order),
// whose payloads joined are the reply's.
const (
	HeaderAcceptChunks = "Acp-Accept-Chunks"
	HeaderChunk        = "Acp-Chunk"
)

// A KV write made as a plain JetStream publish on the key's subject
// (KVSubject, or KVSubjectInDomain across a leaf node) carries what
// nats.go's KV sets itself: HeaderKVOperation KVOperationDelete for a
// delete; a put carries nothing.
const (
	HeaderKVOperation = "KV-Operation"
	KVOperationDelete = "DEL"
)
