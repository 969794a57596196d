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
	// HeaderEventBytes, on a public event, is the running total of the
	// session's public event payload bytes up to it, by which its writer
	// prunes (eventlog.Retention: JetStream has no per-subject byte limit).
	HeaderEventBytes = "Acp-Event-Bytes"
	// HeaderTurnID names the turn a record belongs to. Every record
	// appended while a turn runs carries it.
	HeaderTurnID = "Acp-Turn-Id"
	// HeaderTurnAccepted marks the record that accepts a turn: the first
	// user-message event of the prompt. Its value is the prompt's number of
	// content blocks; the other blocks' events follow in the same atomic
	// append, so acceptance is never partial.
	HeaderTurnAccepted = "Acp-Turn-Accepted"
	// HeaderTurnBlock, on each other event of an accepting append, is the
	// block's index (1, 2, ...): the accepting record is at this record's
	// sequence less it (an atomic append's sequences are consecutive).
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
	// record), is where a new owner resumes the process's records, applied
	// in record-number order: "<from> <applied>[ <held>]", from an ACP_IO
	// sequence at or before every record not yet applied, applied the last
	// update applied and held the first chunk held, by record number ("17",
	// "17.3" for the third update of number 17; "0": none).
	HeaderIOResume = "Acp-Io-Resume"
	// HeaderPrincipal names the principal the gateway authenticated (its
	// token's name): on a session API request, whose adapters count against
	// its quota ("" when none is sent); on a log record, who caused it.
	HeaderPrincipal = "Acp-Principal"
	// HeaderEvict, on an unloadSession request, makes it an eviction for
	// its cause (capacity, namespace_quota, principal_quota): done only while
	// the session is idle (UnloadEvicted), else session_busy.
	HeaderEvict = "Acp-Evict"
	// HeaderQueueNext, on a TurnFinished or PromptDequeued, says prompts
	// wait in the queue and the next is to start: a claim takes it up.
	HeaderQueueNext = "Acp-Queue-Next"
	// HeaderNamespace and HeaderSessionID address a session on runner
	// control requests.
	HeaderNamespace = "Acp-Namespace"
	HeaderSessionID = "Acp-Session-Id"
	// HeaderProcessID names the adapter process a runner record came from.
	HeaderProcessID = "Acp-Process-Id"
	// HeaderRecordNo numbers an adapter process's records in ACP_IO, 1, 2,
	// ... as published (mostly unacknowledged): a gap is a record the stream
	// never stored, told apart from one not yet applied.
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
