package session

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"skein.dev/internal/defaults"
	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/streams"
)

// Config configures the session service. RegisterFlags holds every
// default (DefaultConfig); New takes them for the fields a Config built in
// code leaves zero (WithDefaults).
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
	// EdgeLinkTimeout is how long the turns on an edge runner (one that
	// hosts only the sessions placed on it) outlive the loss of its
	// heartbeat: its link to the cluster dropped, its output waits in its
	// outbox. Past it they end edge_link_lost.
	EdgeLinkTimeout time.Duration
	// StallAfter is how long a running turn's agent may say nothing, with
	// no request waiting on a person, before the turn is stalled
	// (stall.go); negative: never.
	StallAfter time.Duration
	// AskTimeout, when set, answers a permission or input request nobody
	// answered within it with the safe answer (asktimeout.go).
	AskTimeout time.Duration
	// MaxQueued bounds the prompts waiting in one session's queue, and
	// QueueOnFailure says what a cancelled or failed turn does to it:
	// QueueContinue (the next runs) or QueueHold (it waits for the next
	// prompt sent without queue). queue.go.
	MaxQueued      int
	QueueOnFailure string
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
	// BudgetDefault is the spending cap of a session opened without a
	// budget, per namespace (budget.go); none for a namespace it does not
	// name.
	BudgetDefault NamespaceBudgets
	// BudgetDaily caps what each namespace it names may spend in one UTC
	// day, across its sessions (daily.go).
	BudgetDaily NamespaceBudgets
}

// DefaultIOGapTimeout is Config.IOGapTimeout's default: several times the
// longest JetStream election seen (a leader's loss costs a few seconds).
const DefaultIOGapTimeout = 60 * time.Second

// DefaultConfig returns the configuration RegisterFlags installs before
// any flag is parsed.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("session", flag.ContinueOnError))
	return c
}

// WithDefaults returns c with RegisterFlags' default in each field left
// zero whose zero value stands for "the default". The fields whose zero
// means something of its own keep it: no idle timeout, no adapter age, no
// quota, the NATS server's record size, the runner's directory.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	defaults.Set(&c.AttachTimeout, d.AttachTimeout)
	defaults.Set(&c.CallTimeout, d.CallTimeout)
	defaults.Set(&c.MaxPromptBytes, d.MaxPromptBytes)
	defaults.Set(&c.MaxPromptBlocks, d.MaxPromptBlocks)
	defaults.Set(&c.DrainWait, d.DrainWait)
	defaults.Set(&c.CancelGrace, d.CancelGrace)
	defaults.Set(&c.MaxMessageBytes, d.MaxMessageBytes)
	defaults.Set(&c.MaxTurnOutputBytes, d.MaxTurnOutputBytes)
	defaults.Set(&c.MaxPendingPermissions, d.MaxPendingPermissions)
	defaults.Set(&c.MaxPreambleBytes, d.MaxPreambleBytes)
	defaults.Set(&c.SweepInterval, d.SweepInterval)
	defaults.Set(&c.GroupCommitMin, d.GroupCommitMin)
	defaults.Set(&c.IOGapTimeout, d.IOGapTimeout)
	defaults.Set(&c.OwnerTTL, d.OwnerTTL)
	defaults.Set(&c.EdgeLinkTimeout, d.EdgeLinkTimeout)
	defaults.Set(&c.StallAfter, d.StallAfter)
	defaults.Set(&c.MaxQueued, d.MaxQueued)
	defaults.Set(&c.QueueOnFailure, d.QueueOnFailure)
	return c
}

// Validate reports every invalid field; it changes nothing. New validates
// c.WithDefaults().
func (c *Config) Validate() error {
	var errs []error
	positive := func(name string, v time.Duration) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("session.%s must be positive, got %v", name, v))
		}
	}
	positive("attach-timeout", c.AttachTimeout)
	positive("call-timeout", c.CallTimeout)
	positive("drain-wait", c.DrainWait)
	positive("cancel-grace", c.CancelGrace)
	positive("sweep-interval", c.SweepInterval)
	positive("io-gap-timeout", c.IOGapTimeout)
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"max-prompt-bytes", int64(c.MaxPromptBytes)},
		{"max-prompt-blocks", int64(c.MaxPromptBlocks)},
		{"max-message-bytes", c.MaxMessageBytes},
		{"max-turn-output-bytes", c.MaxTurnOutputBytes},
		{"max-pending-permissions", int64(c.MaxPendingPermissions)},
		{"max-preamble-bytes", int64(c.MaxPreambleBytes)},
		{"group-commit-min", int64(c.GroupCommitMin)},
		{"max-queued", int64(c.MaxQueued)},
	} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("session.%s must be positive, got %d", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"idle-timeout", c.IdleTimeout}, {"max-adapter-age", c.MaxAdapterAge}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("session.%s must not be negative (0: never), got %v", f.name, f.v))
		}
	}
	if c.MaxRecordBytes < 0 {
		errs = append(errs, fmt.Errorf("session.max-record-bytes must not be negative (0: the NATS max payload), got %d", c.MaxRecordBytes))
	}
	if c.MaxPromptBlocks > events.MaxPromptBlocks {
		errs = append(errs, fmt.Errorf("session.max-prompt-blocks is %d: a prompt's blocks are appended in one atomic batch, which holds at most %d", c.MaxPromptBlocks, events.MaxPromptBlocks))
	}
	if err := c.WorkspaceRoots.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("session.workspace-roots: %w", err))
	}
	if err := c.WorkspaceGrants.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("session.workspace-grants: %w", err))
	}
	if c.QueueOnFailure != QueueContinue && c.QueueOnFailure != QueueHold {
		errs = append(errs, fmt.Errorf("session.queue-on-failure is %q: want %s or %s", c.QueueOnFailure, QueueContinue, QueueHold))
	}
	if err := c.BudgetDefault.validate(); err != nil {
		errs = append(errs, fmt.Errorf("session.budget-default: %w", err))
	}
	if err := c.BudgetDaily.validate(); err != nil {
		errs = append(errs, fmt.Errorf("session.budget-daily: %w", err))
	}
	if c.OwnerTTL < time.Second {
		errs = append(errs, fmt.Errorf("session.owner-ttl %v is under the 1s minimum", c.OwnerTTL))
	}
	return errors.Join(errs...)
}

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
	fs.DurationVar(&c.StallAfter, "session.stall-after", 10*time.Minute, "a running turn whose agent says nothing this long, with no request waiting on a person, is stalled (a state event, a metric); negative: never")
	fs.IntVar(&c.MaxQueued, "session.max-queued", 64, "most prompts waiting in one session's queue")
	fs.StringVar(&c.QueueOnFailure, "session.queue-on-failure", QueueContinue, "what a cancelled or failed turn does to the prompts queued behind it: continue (the next runs) or hold (they wait for the next prompt sent without queue)")
	fs.DurationVar(&c.AskTimeout, "session.ask-timeout", 0, "answer a permission or input request nobody answered this long with the safe answer (reject, decline), as principal skein (0: never)")
	fs.DurationVar(&c.EdgeLinkTimeout, "session.edge-link-timeout", 10*time.Minute, "how long a turn on an edge runner (skein runner --join) waits for the runner's link to come back before it ends edge_link_lost")
	fs.Int64Var(&c.MaxEventsPerSession, "session.max-events-per-session", eventlog.DefaultMaxEventsPerSession, "most public events ACP_LOG keeps of a session; the oldest are pruned first")
	fs.Int64Var(&c.MaxBytesPerSession, "session.max-bytes-per-session", eventlog.DefaultMaxBytesPerSession, "most bytes of public event payloads ACP_LOG keeps of a session; the oldest are pruned first")
	fs.DurationVar(&c.IOGapTimeout, "session.io-gap-timeout", DefaultIOGapTimeout, "how long a turn waits, without progress, for an adapter's records stored out of order before failing output_lost; keep it well past the longest JetStream election")
	c.MaxAdaptersPerNamespace, c.MaxAdaptersPerPrincipal = DefaultNamespaceQuota, DefaultPrincipalQuota
	fs.Var(&c.MaxAdaptersPerNamespace, "session.max-adapters-per-namespace", "most live adapters one namespace may hold: a number, or a percentage of the live runners' capacity (\"50%\"); 0: unlimited")
	fs.Var(&c.MaxAdaptersPerPrincipal, "session.max-adapters-per-principal", "most live adapters one principal (the gateway's token name) may hold: a number, or a percentage of the live runners' capacity (\"25%\"); 0: unlimited")
	fs.Var(&c.BudgetDefault, "session.budget-default", "spending cap of a session opened without a budget, per namespace: comma-separated ns=AMOUNT CUR (\"team-a=25 USD\"; * for every other namespace); none by default")
	fs.Var(&c.BudgetDaily, "session.budget-daily", "most a namespace's sessions may spend together in one UTC day: comma-separated ns=AMOUNT CUR (\"team-a=100 USD\"; * for every other namespace); none by default")
	fs.IntVar(&c.GroupCommitMin, "session.group-commit-min", 8, "on replicated streams, the smallest group of queued adapter output written as one atomic batch")
}
