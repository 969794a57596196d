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
	// payload bytes of the session's public events up to and including
	// it. The bytes a session retains are then the newest event's total
	// less the oldest retained one's, plus that one's size: two reads. The
	// session's writer prunes the oldest events by it, JetStream having no
	// per-subject byte limit (eventlog.Retention).
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
	// block's index in the prompt (1, 2, ...). An atomic append stores its
	// records at consecutive sequences, so the accepting record is this
	// one's sequence less the index: a new owner finds a turn's start from
	// whichever of its records ends the log.
	HeaderTurnBlock = "Acp-Turn-Block"
	// HeaderTurnStart, on every record of a turn after its acceptance, is
	// the sequence of the accepting record: where a new owner finds the
	// turn's idempotency key and content hash in one read.
	HeaderTurnStart = "Acp-Turn-Start"
	// HeaderPart numbers the records one flush of adapter output made
	// (a message split to fit, or text and an image), from 0, so that two
	// identical pieces are not mistaken for one update stored twice.
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
	// HeaderPrincipal, on a request of the session API, names the
	// principal the gateway authenticated for it (its token's name). The
	// session service counts the adapters a request attaches against that
	// principal's quota; a caller that sends none counts as principal "".
	// On a log record, it names who caused it: a user message's, a
	// permission or input answer's, a cancel's TurnFinished.
	HeaderPrincipal = "Acp-Principal"
	// HeaderEvict, on an unloadSession request, makes it an eviction for
	// the cause it names (capacity, namespace_quota, principal_quota):
	// the owner unloads the session only while it is idle (no turn runs,
	// nothing waits for an answer), with reason UnloadEvicted, and
	// answers session_busy otherwise.
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
	// HeaderRecordNo numbers the records of one adapter process in ACP_IO,
	// 1, 2, 3, ... in the order the runner published them. Most records
	// are published without waiting for JetStream's acknowledgement, so the
	// number is how their reader tells a record the stream never stored
	// (a gap in the numbers) from one it has not applied yet.
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
