package events

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Streams. ACP_LOG is the truth; ACP_IO is the private record of what an
// adapter-runner observed. Both are created (idempotently, with the configs in
// streams.go) by every service at start-up, so start order does not matter.
const (
	// StreamLog captures LogSubjectsAll: every session's public events (.ev)
	// and lifecycle records (.ctl).
	StreamLog = "ACP_LOG"
	// StreamIO captures IOSubjectsAll: adapter output per session, written by
	// the runner that hosts the adapter and consumed by the session owner.
	StreamIO = "ACP_IO"
)

// KV buckets.
const (
	// BucketSessions maps SessionKey(ns, sid) to the SessionMeta projection.
	BucketSessions = "ACP_SESSIONS"
	// BucketOwners maps SessionKey(ns, sid) to the owner lease.
	BucketOwners = "ACP_OWNERS"
	// BucketRunners maps a RunnerID to its RunnerInfo heartbeat.
	BucketRunners = "ACP_RUNNERS"
	// BucketBudgets maps "<ns>.<YYYYMMDD>" to a namespace's spend that UTC day.
	BucketBudgets = "ACP_BUDGETS"
)

// Webhooks (services/notify): ACP_NOTIFY keeps every notification on
// NotifySubject; ACP_WEBHOOKS maps "<ns>.<id>" to a registration, and
// ACP_WEBHOOK_DELIVERIES the same key to its recent attempts.
const (
	StreamNotify            = "ACP_NOTIFY"
	NotifySubjectsAll       = "acp.notify.>"
	BucketWebhooks          = "ACP_WEBHOOKS"
	BucketWebhookDeliveries = "ACP_WEBHOOK_DELIVERIES"
)

// NotifySubject returns "acp.notify.<ns>.<type>"; a type is dotted
// ("turn.finished"), so it spans tokens.
func NotifySubject(ns Namespace, typ string) string { return join("acp.notify", string(ns), typ) }

// KVStream returns the name of the stream that backs bucket ("KV_<bucket>"),
// for direct gets of a key's history.
func KVStream(bucket string) string { return "KV_" + bucket }

// KVSubject returns the subject that holds key in bucket
// ("$KV.<bucket>.<key>"), for conditional publishes and direct gets.
func KVSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// JetStreamDomain is the JetStream domain of Skein's cluster
// (ops/cluster/nats/node.conf). Only what crosses a leaf node names it: a
// cluster denies a leaf connection of an account its JetStream API and
// $KV subjects, unless they are addressed to its domain.
const JetStreamDomain = "skein"

// KVSubjectInDomain returns the subject that writes key in bucket from a
// leaf node, through JetStream domain ("$JS.<domain>.API.$KV.<bucket>.<key>"):
// the cluster maps it to KVSubject(bucket, key), as nats.go's KV does for
// a JetStream context of that domain.
func KVSubjectInDomain(domain, bucket, key string) string {
	return "$JS." + domain + ".API." + KVSubject(bucket, key)
}

// LogKind is the last token of a log subject.
type LogKind string

const (
	// LogEvents holds public durable events: AcpDurableEvent variants, each
	// with a contiguous per-session HeaderEventNo.
	LogEvents LogKind = "ev"
	// LogControl holds lifecycle records (records.go). They are not public
	// events and carry no event number.
	LogControl LogKind = "ctl"
)

// Subject wildcards captured by the streams and used by subscribers.
const (
	LogSubjectsAll  = "acp.log.>"
	TailSubjectsAll = "acp.tail.>"
	IOSubjectsAll   = "acp.io.*.*.*"     // not acp.io.>: see IOSubject
	IOTailAll       = "acp.iotail.*.*.*" // ACP_IO's RePublish of IOSubjectsAll
	LiveSubjectsAll = "acp.live.>"
	EndNoticesAll   = "acp.live.*.*.end" // every session's EndNoticeSubject
)

// LogSubject returns "acp.log.<ns>.<sid>.<kind>". Never core-subscribe to it:
// a core subscriber also sees appends the stream rejected. Read the stream,
// or TailSubject.
func LogSubject(ns Namespace, sid SessionID, kind LogKind) string {
	return join("acp.log", string(ns), string(sid), string(kind))
}

// LogFilter returns "acp.log.<ns>.<sid>.>", every record of one session. It
// is the subject of the single-writer compare-and-set
// (Nats-Expected-Last-Subject-Sequence-Subject).
func LogFilter(ns Namespace, sid SessionID) string {
	return join("acp.log", string(ns), string(sid), ">")
}

// KeySubject returns "acp.log.<ns>.<sid>.key.<h>", where <h> is the first
// 32 hex digits of the SHA-256 of an idempotency key. The TurnFinished of a
// prompt sent with that key is stored there instead of on LogControl, so
// one direct get finds the outcome of a keyed prompt, however old.
func KeySubject(ns Namespace, sid SessionID, key string) string {
	sum := sha256.Sum256([]byte(key))
	return join("acp.log", string(ns), string(sid), "key", hex.EncodeToString(sum[:16]))
}

// KeySubjects returns "acp.log.<ns>.<sid>.key.>": every KeySubject of one
// session.
func KeySubjects(ns Namespace, sid SessionID) string {
	return join("acp.log", string(ns), string(sid), "key", ">")
}

// TitleSubject returns "acp.log.<ns>.<sid>.title", where the session's
// TitleChanged records are stored instead of on LogControl, so that one
// direct get (the subject's last message) finds the session's title.
func TitleSubject(ns Namespace, sid SessionID) string {
	return join("acp.log", string(ns), string(sid), "title")
}

// BudgetSubject returns "acp.log.<ns>.<sid>.budget": the session's
// BudgetChanged records, the newest its cap and spend (budget.go).
func BudgetSubject(ns Namespace, sid SessionID) string {
	return join("acp.log", string(ns), string(sid), "budget")
}

// OpenedSubject returns "acp.log.<ns>.<sid>.opened", where the session's
// SessionOpened record is stored instead of on LogControl. ACP_LOG bounds
// the records it keeps per subject (MaxMsgsPerSubject), and a session's
// control records grow with its turns; on a subject of its own the record
// that makes the session exist is never pruned, and one direct get finds it.
func OpenedSubject(ns Namespace, sid SessionID) string {
	return join("acp.log", string(ns), string(sid), "opened")
}

// TailSubject returns "acp.tail.<ns>.<sid>.<kind>": the stream's RePublish of
// every record stored on LogSubject, for cheap fan-out to live viewers. It
// carries the Nats-Sequence and Nats-Last-Sequence headers.
func TailSubject(ns Namespace, sid SessionID, kind LogKind) string {
	return join("acp.tail", string(ns), string(sid), string(kind))
}

// LiveSubject returns "acp.live.<ns>.<sid>": ephemeral message and thought
// deltas (AcpEphemeralSessionUpdateEvent) and adapter stderr. Core NATS only;
// nothing here is stored.
func LiveSubject(ns Namespace, sid SessionID) string {
	return join("acp.live", string(ns), string(sid))
}

// EndNoticeSubject returns "acp.live.<ns>.<sid>.end", core NATS: the
// owner's TurnEndUnrecorded while a full store refuses a turn's end.
func EndNoticeSubject(ns Namespace, sid SessionID) string {
	return join("acp.live", string(ns), string(sid), "end")
}

// ParseEndNoticeSubject returns the session of an EndNoticeSubject.
func ParseEndNoticeSubject(subject string) (Namespace, SessionID, error) {
	t := strings.Split(subject, ".")
	if len(t) != 5 || t[0] != "acp" || t[1] != "live" || t[4] != "end" {
		return "", "", Errorf(CodeInvalidRequest, "%q is not an end notice subject", subject)
	}
	ns, err := ParseNamespace(t[2])
	if err != nil {
		return "", "", err
	}
	sid, err := ParseSessionID(t[3])
	return ns, sid, err
}

// IOSubject returns "acp.io.<ns>.<sid>.<runner>": the records runner's
// adapter of the session writes. An edge runner's credential may publish
// only acp.io.*.*.<its ID>, and a session's owner drops every record of a
// runner its adapter does not run on (why ACP_IO captures acp.io.*.*.*,
// not acp.io.>: docs/design/departures.md).
func IOSubject(ns Namespace, sid SessionID, runner RunnerID) string {
	return join("acp.io", string(ns), string(sid), string(runner))
}

// IOSessionSubjects returns "acp.io.<ns>.<sid>.*": every runner's records
// of one session.
func IOSessionSubjects(ns Namespace, sid SessionID) string {
	return join("acp.io", string(ns), string(sid), "*")
}

// IOTailSubject returns "acp.iotail.<ns>.<sid>.*": ACP_IO's RePublish of
// the session's records, with Nats-Sequence and Nats-Last-Sequence (the
// previous record of the same runner), which its owner follows.
func IOTailSubject(ns Namespace, sid SessionID) string {
	return join("acp.iotail", string(ns), string(sid), "*")
}

// IORunner returns the runner an ACP_IO or IOTailSubject subject names,
// or "" if it names none.
func IORunner(subject string) RunnerID {
	t := strings.Split(subject, ".")
	if len(t) != 5 || t[0] != "acp" || (t[1] != "io" && t[1] != "iotail") {
		return ""
	}
	return RunnerID(t[4])
}

// SessionKey returns "<ns>.<sid>", the key of a session in BucketSessions and
// BucketOwners.
func SessionKey(ns Namespace, sid SessionID) string {
	return string(ns) + "." + string(sid)
}

// ParseSessionKey splits a SessionKey into its namespace and session ID,
// each validated.
func ParseSessionKey(key string) (Namespace, SessionID, error) {
	nsPart, sidPart, ok := strings.Cut(key, ".")
	if !ok {
		return "", "", Errorf(CodeInvalidSessionID, "session key %q has no namespace", key)
	}
	ns, err := ParseNamespace(nsPart)
	if err != nil {
		return "", "", err
	}
	sid, err := ParseSessionID(sidPart)
	if err != nil {
		return "", "", err
	}
	return ns, sid, nil
}

// APIServiceSession and friends name the nats micro services, as shown by
// `nats micro ls`.
const (
	APIServiceSession = "skein-session"
	APIServiceHistory = "skein-history"
	APIServiceRunner  = "skein-adapter-runner"
)

// APISubject returns "acp.api.<ns>.<op>".
func APISubject(ns Namespace, op Op) string { return join("acp.api", string(ns), string(op)) }

// IsAPISubject reports whether subject is a request API subject,
// "acp.api.<ns>.<op>": one a pool of replicas serves, unlike an instance's
// own (OwnerSubject, RunnerSubject), which one process serves or nobody.
func IsAPISubject(subject string) bool { return strings.HasPrefix(subject, "acp.api.") }

// APIWildcard returns "acp.api.*.<op>", the subject a service listens on to
// serve op for every namespace.
func APIWildcard(op Op) string { return join("acp.api", "*", string(op)) }

// OwnerSubject returns "acp.owner.<replica>.<ns>.<op>": where a session
// service replica that is not a session's owner forwards a request of the
// API to the replica that is.
func OwnerSubject(replica string, ns Namespace, op Op) string {
	return join("acp.owner", replica, string(ns), string(op))
}

// NamespaceFromAPISubject extracts <ns> from "acp.api.<ns>.<op>" or from a
// forwarded request's "acp.owner.<replica>.<ns>.<op>". The token must be a
// valid namespace: unlike ParseNamespace, an empty token is an error, never
// DefaultNamespace, so that a malformed subject cannot land a request in the
// default tenant.
func NamespaceFromAPISubject(subject string) (Namespace, error) {
	parts := strings.Split(subject, ".")
	var tok string
	switch {
	case len(parts) == 4 && parts[0] == "acp" && parts[1] == "api":
		tok = parts[2]
	case len(parts) == 5 && parts[0] == "acp" && parts[1] == "owner":
		tok = parts[3]
	default:
		return "", Errorf(CodeInvalidRequest, "not an API subject: %q", Truncate(subject, 80))
	}
	if ns := Namespace(tok); ns.Valid() {
		return ns, nil
	}
	return "", Errorf(CodeInvalidNamespace, "namespace %q must match [a-z0-9][a-z0-9_-]{0,62}", Truncate(tok, 80))
}

// RunnerSubject returns "acp.runner.<id>.<op>".
func RunnerSubject(id RunnerID, op RunnerOp) string {
	return join("acp.runner", string(id), string(op))
}

func join(prefix string, tokens ...string) string {
	n := len(prefix)
	for _, t := range tokens {
		n += 1 + len(t)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(prefix)
	for _, t := range tokens {
		b.WriteByte('.')
		b.WriteString(t)
	}
	return b.String()
}
