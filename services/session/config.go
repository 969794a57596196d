package session

import (
	"flag"
	"time"
)

// Config configures the session service.
type Config struct {
	// Replicas of the streams and buckets the service provisions.
	Replicas int
	// DefaultCwd is the working directory of a session opened without one.
	// Empty means the runner's per-session work directory.
	DefaultCwd string
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
	// GroupCommitMin is the smallest group of queued adapter output written
	// as one atomic batch; smaller groups are written record by record.
	// Zero chooses by Replicas: on one replica an atomic batch is staged on
	// disk (about 10 ms), so only large groups gain; on three it is staged
	// in memory.
	GroupCommitMin int
}

// RegisterFlags registers the service's flags in fs, prefixed "session.".
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DefaultCwd, "session.default-cwd", "", "working directory of sessions opened without one (empty: the runner's per-session directory)")
	fs.DurationVar(&c.AttachTimeout, "session.attach-timeout", 60*time.Second, "bound on starting an adapter and opening its ACP session")
	fs.DurationVar(&c.CallTimeout, "session.call-timeout", 10*time.Second, "bound on one runner control request")
	fs.IntVar(&c.MaxPromptBytes, "session.max-prompt-bytes", 64<<20, "largest prompt content in bytes")
	fs.IntVar(&c.MaxPromptBlocks, "session.max-prompt-blocks", 16384, "most content blocks in one prompt")
	fs.DurationVar(&c.DrainWait, "session.drain-wait", 5*time.Second, "on shutdown, how long to wait for turns in flight")
	fs.IntVar(&c.GroupCommitMin, "session.group-commit-min", 0, "smallest group of queued adapter output written as one atomic batch (0: 256 on one replica, 8 on more)")
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
		c.MaxPromptBytes = 64 << 20
	}
	if c.MaxPromptBlocks <= 0 {
		c.MaxPromptBlocks = 16384
	}
	if c.DrainWait <= 0 {
		c.DrainWait = 5 * time.Second
	}
	if c.GroupCommitMin <= 0 {
		c.GroupCommitMin = 256
		if c.Replicas > 1 {
			c.GroupCommitMin = 8
		}
	}
	return nil
}
