package session

import (
	"flag"
	"fmt"
	"time"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/streams"
)

// Config configures the session service.
type Config struct {
	// Replicas of the streams and buckets the service provisions.
	Replicas int
	// DefaultCwd is the working directory of a session opened without one.
	// Empty means the runner's per-session work directory.
	DefaultCwd string
	// WorkspaceRoots are the directories sessions may work in: the
	// runners' adapter-runner.workspace-roots (skein wires them in when
	// the session service and the runner share a process). An open whose
	// cwd or additional directories lie outside <root>/<namespace> for
	// each root (and WorkspaceGrants), symlinks resolved, is refused
	// before anything is recorded, and a session opened
	// without a cwd gets <first root>/<namespace>/<session ID>. Empty
	// leaves both to the runner, which checks at launch whatever this
	// says (package workspace).
	WorkspaceRoots workspace.Roots
	// WorkspaceGrants are the directories, per namespace, its sessions
	// may work under besides <root>/<namespace>: the runners'
	// adapter-runner.workspace-grants, wired in like the roots. Only a
	// grant widens a namespace.
	WorkspaceGrants workspace.Grants
	// AttachTimeout bounds starting an adapter on a runner and opening its
	// ACP session.
	AttachTimeout time.Duration
	// CallTimeout bounds one runner control request (a prompt dispatch, a
	// permission answer): the runner answers once the line is written.
	CallTimeout time.Duration
	// MaxPromptBytes and MaxPromptBlocks bound one prompt's content.
	MaxPromptBytes  int
	MaxPromptBlocks int
	// DrainWait bounds how long Run waits, on shutdown, for turns in flight.
	DrainWait time.Duration
	// GroupCommitMin is, on more than one replica, the smallest group of
	// queued adapter output written as one atomic batch; smaller groups are
	// written record by record. On one replica queued output is pipelined
	// instead (an atomic batch there is staged on disk, about 10 ms).
	GroupCommitMin int
	// CancelGrace bounds how long an adapter may take to answer a prompt
	// that was cancelled (or failed a cap) before it is evicted.
	CancelGrace time.Duration
	// MaxMessageBytes and MaxTurnOutputBytes bound one completed message
	// and everything one turn outputs; past either, the turn fails.
	MaxMessageBytes    int64
	MaxTurnOutputBytes int64
	// MaxPendingPermissions bounds the permission requests waiting for an
	// answer in one session.
	MaxPendingPermissions int
	// MaxRecordBytes is the largest log record; 0 takes the NATS server's
	// max payload less room for headers. Larger messages are split.
	MaxRecordBytes int
	// MaxPreambleBytes bounds the continuation preamble a fallback restore
	// gives the next prompt.
	MaxPreambleBytes int
	// IdleTimeout unloads an adapter with no turn, no pending request and
	// no activity for that long; MaxAdapterAge unloads one attached that
	// long (when not in a turn). Zero turns either off. SweepInterval is
	// how often both are checked.
	IdleTimeout   time.Duration
	MaxAdapterAge time.Duration
	SweepInterval time.Duration
	// OwnerTTL is how long a session's owner lease outlives its last
	// renewal (renewed every third of it): how long the sessions of a
	// replica that stops answering wait before another takes them.
	OwnerTTL time.Duration
	// MaxEventsPerSession and MaxBytesPerSession bound the history ACP_LOG
	// keeps of each session; the oldest events are pruned first, and an
	// append larger than either is rejected (eventlog.Retention).
	MaxEventsPerSession int64
	MaxBytesPerSession  int64
	// IOGapTimeout bounds how long the owner waits, without progress, for
	// an adapter's records numbered before ones ACP_IO stored already (a
	// record the runner retries after a fault is stored late); then the
	// missing records are lost and the running turn fails output_lost. It
	// must be well past the longest election.
	IOGapTimeout time.Duration
	// MaxAdaptersPerNamespace and MaxAdaptersPerPrincipal bound the live
	// adapters one namespace, and one principal (HeaderPrincipal), may
	// hold at once across the cluster: a number, or a percentage of the
	// capacity of the runners alive; zero is unlimited (quota.go). Over
	// either, the namespace's or principal's own least recently used
	// idle adapter is evicted; with none idle, the attach is refused
	// rate_limited.
	MaxAdaptersPerNamespace Quota
	MaxAdaptersPerPrincipal Quota
}

// DefaultIOGapTimeout is Config.IOGapTimeout's default: several times the
// longest JetStream election seen (a leader's loss costs a few seconds).
const DefaultIOGapTimeout = 60 * time.Second

// RegisterFlags registers the service's flags in fs, prefixed "session.".
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DefaultCwd, "session.default-cwd", "", "working directory of sessions opened without one (empty: the runner's per-session directory)")
	fs.Var(&c.WorkspaceRoots, "session.workspace-roots", "comma-separated directories sessions may work in, as the runners' adapter-runner.workspace-roots; an open outside them is refused before it is recorded (empty: the runner checks at launch; skein takes the runner's when both run in one process)")
	fs.Var(&c.WorkspaceGrants, "session.workspace-grants", "comma-separated namespace=directory pairs: directories a namespace's sessions may work under besides <root>/<namespace>, as the runners' adapter-runner.workspace-grants (skein takes the runner's when both run in one process)")
	fs.DurationVar(&c.AttachTimeout, "session.attach-timeout", 60*time.Second, "bound on starting an adapter and opening its ACP session; keep it above adapter-runner.create-timeout, so the runner reports what the agent did first")
	fs.DurationVar(&c.CallTimeout, "session.call-timeout", 10*time.Second, "bound on one runner control request")
	fs.IntVar(&c.MaxPromptBytes, "session.max-prompt-bytes", events.DefaultMaxPromptBytes, "largest prompt content in bytes, for NATS callers (the gateway applies its own, by default the same)")
	fs.IntVar(&c.MaxPromptBlocks, "session.max-prompt-blocks", events.DefaultMaxPromptBlocks, "most content blocks in one prompt, for NATS callers (the gateway applies its own, by default the same)")
	fs.DurationVar(&c.DrainWait, "session.drain-wait", 5*time.Second, "on shutdown, how long to wait for turns in flight")
	fs.DurationVar(&c.CancelGrace, "session.cancel-grace", 10*time.Second, "how long an adapter may take to answer a cancelled prompt before it is evicted")
	fs.Int64Var(&c.MaxMessageBytes, "session.max-message-bytes", 64<<20, "largest completed message; a turn that writes a larger one fails")
	fs.Int64Var(&c.MaxTurnOutputBytes, "session.max-turn-output-bytes", 256<<20, "most output one turn may write")
	fs.IntVar(&c.MaxPendingPermissions, "session.max-pending-permissions", 1000, "most permission requests waiting in one session")
	fs.IntVar(&c.MaxRecordBytes, "session.max-record-bytes", 0, "largest log record (0: the NATS max payload less header room)")
	fs.IntVar(&c.MaxPreambleBytes, "session.max-preamble-bytes", 4<<20, "largest continuation preamble a fallback restore gives the next prompt")
	fs.DurationVar(&c.IdleTimeout, "session.idle-timeout", 30*time.Minute, "unload an adapter idle this long (0: never)")
	fs.DurationVar(&c.MaxAdapterAge, "session.max-adapter-age", 24*time.Hour, "unload an adapter attached this long, between turns (0: never)")
	fs.DurationVar(&c.SweepInterval, "session.sweep-interval", 2*time.Second, "how often idle adapters and running turns are checked")
	fs.DurationVar(&c.OwnerTTL, "session.owner-ttl", streams.DefaultOwnerTTL, "how long a session's owner lease outlives its last renewal (at least 1s)")
	fs.Int64Var(&c.MaxEventsPerSession, "session.max-events-per-session", eventlog.DefaultMaxEventsPerSession, "most public events ACP_LOG keeps of a session; the oldest are pruned first")
	fs.Int64Var(&c.MaxBytesPerSession, "session.max-bytes-per-session", eventlog.DefaultMaxBytesPerSession, "most bytes of public event payloads ACP_LOG keeps of a session; the oldest are pruned first")
	fs.DurationVar(&c.IOGapTimeout, "session.io-gap-timeout", DefaultIOGapTimeout, "how long a turn waits, without progress, for an adapter's records stored out of order before failing output_lost; keep it well past the longest JetStream election")
	c.MaxAdaptersPerNamespace, c.MaxAdaptersPerPrincipal = DefaultNamespaceQuota, DefaultPrincipalQuota
	fs.Var(&c.MaxAdaptersPerNamespace, "session.max-adapters-per-namespace", "most live adapters one namespace may hold: a number, or a percentage of the live runners' capacity (\"50%\"); 0: unlimited")
	fs.Var(&c.MaxAdaptersPerPrincipal, "session.max-adapters-per-principal", "most live adapters one principal (the gateway's token name) may hold: a number, or a percentage of the live runners' capacity (\"25%\"); 0: unlimited")
	fs.IntVar(&c.GroupCommitMin, "session.group-commit-min", 8, "on replicated streams, the smallest group of queued adapter output written as one atomic batch")
}

// Validate fills in defaults for zero values.
func (c *Config) Validate() error {
	if c.AttachTimeout <= 0 {
		c.AttachTimeout = 60 * time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 10 * time.Second
	}
	if c.MaxPromptBytes <= 0 {
		c.MaxPromptBytes = events.DefaultMaxPromptBytes
	}
	if c.MaxPromptBlocks <= 0 {
		c.MaxPromptBlocks = events.DefaultMaxPromptBlocks
	}
	if c.MaxPromptBlocks > events.MaxPromptBlocks {
		return fmt.Errorf("session.max-prompt-blocks is %d: a prompt's blocks are appended in one atomic batch, which holds at most %d", c.MaxPromptBlocks, events.MaxPromptBlocks)
	}
	if c.DrainWait <= 0 {
		c.DrainWait = 5 * time.Second
	}
	if c.CancelGrace <= 0 {
		c.CancelGrace = 10 * time.Second
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = 64 << 20
	}
	if c.MaxTurnOutputBytes <= 0 {
		c.MaxTurnOutputBytes = 256 << 20
	}
	if c.MaxPendingPermissions <= 0 {
		c.MaxPendingPermissions = 1000
	}
	if c.MaxPreambleBytes <= 0 {
		c.MaxPreambleBytes = 4 << 20
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = 2 * time.Second
	}
	if c.GroupCommitMin <= 0 {
		c.GroupCommitMin = 8
	}
	if c.IOGapTimeout <= 0 {
		c.IOGapTimeout = DefaultIOGapTimeout
	}
	if err := c.WorkspaceRoots.Validate(); err != nil {
		return fmt.Errorf("session.workspace-roots: %w", err)
	}
	if err := c.WorkspaceGrants.Validate(); err != nil {
		return fmt.Errorf("session.workspace-grants: %w", err)
	}
	if c.OwnerTTL <= 0 {
		c.OwnerTTL = streams.DefaultOwnerTTL
	}
	if c.OwnerTTL < time.Second {
		return fmt.Errorf("session.owner-ttl %v is under the 1s minimum", c.OwnerTTL)
	}
	return nil
}
