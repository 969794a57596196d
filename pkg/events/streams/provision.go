package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Limits of the streams, all configurable through Options.
const (
	// DefaultIOMaxAge is how long runner output stays in ACP_IO. The owner
	// applies it within milliseconds; the rest is a window for takeover.
	DefaultIOMaxAge = 24 * time.Hour
	// DefaultMaxConsumers is well above the server's default of 1,000 per
	// stream: each loaded session has one ordered consumer on ACP_IO.
	DefaultMaxConsumers = 100_000
	// DefaultDuplicateWindow is the Nats-Msg-Id window.
	DefaultDuplicateWindow = 2 * time.Minute
	// DefaultRunnerTTL is how long a runner's heartbeat lives in ACP_RUNNERS.
	DefaultRunnerTTL = 15 * time.Second
	// DailySpendTTL is how long a namespace's daily spend (BucketBudgets)
	// outlives its last change: a day past the day it counts.
	DailySpendTTL = 48 * time.Hour
	// DefaultOwnerTTL is the owner lease lifetime in ACP_OWNERS: a lease
	// its owner stops renewing is gone that long after its last renewal.
	DefaultOwnerTTL = 15 * time.Second
)

// Options sets the replication and limits of what Provision creates. The zero
// value means a single replica and the defaults above.
type Options struct {
	Replicas int
	// MaxEventsPerSession and MaxBytesPerSession bound what ACP_LOG keeps
	// of a session (see Retention). They are applied when the stream is
	// created or updated.
	MaxEventsPerSession int64
	MaxBytesPerSession  int64
	IOMaxAge            time.Duration
	// OwnerTTL is the lifetime of an owner lease (ACP_OWNERS' max age; at
	// least a second, the shortest marker the server keeps).
	OwnerTTL time.Duration
}

func (o Options) withDefaults() Options {
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.MaxEventsPerSession <= 0 {
		o.MaxEventsPerSession = eventlog.DefaultMaxEventsPerSession
	}
	if o.MaxBytesPerSession <= 0 {
		o.MaxBytesPerSession = eventlog.DefaultMaxBytesPerSession
	}
	if o.IOMaxAge <= 0 {
		o.IOMaxAge = DefaultIOMaxAge
	}
	if o.OwnerTTL <= 0 {
		o.OwnerTTL = DefaultOwnerTTL
	}
	o.OwnerTTL = max(o.OwnerTTL, time.Second)
	return o
}

// LogConfig returns the ACP_LOG configuration.
func LogConfig(o Options) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:               events.StreamLog,
		Description:        "Skein session logs: public events (.ev) and lifecycle records (.ctl)",
		Subjects:           []string{events.LogSubjectsAll},
		Storage:            jetstream.FileStorage,
		Replicas:           o.Replicas,
		Retention:          jetstream.LimitsPolicy,
		MaxMsgsPerSubject:  o.MaxEventsPerSession,
		Duplicates:         DefaultDuplicateWindow,
		AllowDirect:        true,
		AllowAtomicPublish: true,
		AllowRollup:        true,
		AllowMsgTTL:        true,
		MaxConsumers:       DefaultMaxConsumers,
		// The byte cap travels with the stream, as the count cap does, so
		// every writer applies the one the operator set.
		Metadata: map[string]string{eventlog.MetaMaxBytesPerSession: strconv.FormatInt(o.MaxBytesPerSession, 10)},
		RePublish: &jetstream.RePublish{
			Source:      events.LogSubjectsAll,
			Destination: events.TailSubjectsAll,
		},
	}
}

// IOConfig returns the ACP_IO configuration.
func IOConfig(o Options) jetstream.StreamConfig {
	o = o.withDefaults()
	cfg := jetstream.StreamConfig{
		Name:         events.StreamIO,
		Description:  "Skein adapter output, per session, as observed by adapter-runners",
		Subjects:     []string{events.IOSubjectsAll},
		Storage:      jetstream.FileStorage,
		Replicas:     o.Replicas,
		Retention:    jetstream.LimitsPolicy,
		MaxAge:       o.IOMaxAge,
		Duplicates:   DefaultDuplicateWindow,
		AllowDirect:  true,
		MaxConsumers: DefaultMaxConsumers,
		RePublish: &jetstream.RePublish{
			Source:      events.IOSubjectsAll,
			Destination: "acp.iotail.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}", // events.IOTailAll, token for token
		},
	}
	if cfg.Replicas == 1 {
		// Every message chunk an agent writes is a record here, and on a
		// single server the store writes each one to its file as it
		// comes (a replicated stream writes behind its Raft log already,
		// and refuses this mode). Writing behind turns a write per record
		// into one per burst. What it risks is the last milliseconds of
		// records when nats-server itself is killed: the gap in the
		// runner's record numbers tells the owner, which fails the turn
		// (HeaderRecordNo). ACP_LOG, the truth, writes through.
		cfg.PersistMode = jetstream.AsyncPersistMode
	}
	return cfg
}

// DefaultNotifyMaxAge is how long ACP_NOTIFY keeps a notification: past
// the notify service's retries (24 hours by default), with a day to spare.
const DefaultNotifyMaxAge = 48 * time.Hour

// NotifyDuplicateWindow is ACP_NOTIFY's Nats-Msg-Id window: the notify
// service publishes a notification again when the log record it comes
// from is delivered again, which can be long after a restart.
const NotifyDuplicateWindow = time.Hour

// NotifyConfig returns the ACP_NOTIFY configuration: every notification,
// on acp.notify.<ns>.<type>, for the webhooks' consumers and any service.
func NotifyConfig(o Options) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:         events.StreamNotify,
		Description:  "Skein notifications: webhook events, by namespace and type",
		Subjects:     []string{events.NotifySubjectsAll},
		Storage:      jetstream.FileStorage,
		Replicas:     o.Replicas,
		Retention:    jetstream.LimitsPolicy,
		MaxAge:       DefaultNotifyMaxAge,
		Duplicates:   NotifyDuplicateWindow,
		AllowDirect:  true,
		MaxConsumers: DefaultMaxConsumers,
	}
}

// bucketConfigs returns the KV buckets' configurations.
func bucketConfigs(o Options) []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{Bucket: events.BucketSessions, Description: "Skein session metadata projection", Storage: jetstream.FileStorage, Replicas: o.Replicas},
		// A lease lives OwnerTTL past its last renewal (each renewal is a
		// new revision); the marker its expiry leaves tells the other
		// replicas that the session is free.
		{Bucket: events.BucketOwners, Description: "Skein session owner leases", Storage: jetstream.FileStorage, Replicas: o.Replicas, TTL: o.OwnerTTL, LimitMarkerTTL: o.OwnerTTL},
		// A heartbeat that stops expires, and the marker its expiry leaves
		// tells watchers (the session service) that the runner is gone.
		{Bucket: events.BucketRunners, Description: "Skein adapter-runner heartbeats", Storage: jetstream.MemoryStorage, Replicas: o.Replicas, TTL: DefaultRunnerTTL, LimitMarkerTTL: DefaultRunnerTTL},
		// A namespace's spend of one UTC day, for session.budget-daily:
		// kept a day past its day, then it expires.
		{Bucket: events.BucketBudgets, Description: "Skein namespaces' daily spend", Storage: jetstream.FileStorage, Replicas: o.Replicas, TTL: DailySpendTTL},
		{Bucket: events.BucketWebhooks, Description: "Skein webhook registrations", Storage: jetstream.FileStorage, Replicas: o.Replicas},
		{Bucket: events.BucketWebhookDeliveries, Description: "Skein webhook delivery attempts, the newest of each webhook", Storage: jetstream.FileStorage, Replicas: o.Replicas},
	}
}

// kvStreamConfig returns the stream that backs a KV bucket, as nats.go's
// CreateKeyValue makes it (a test holds the two equal): provisioning creates
// and compares buckets as the streams they are, so one code path, and one
// JSON file each under ops/nats, serves both.
func kvStreamConfig(kv jetstream.KeyValueConfig) jetstream.StreamConfig {
	dup := DefaultDuplicateWindow
	if kv.TTL > 0 && kv.TTL < dup {
		dup = kv.TTL
	}
	cfg := jetstream.StreamConfig{
		Name:              "KV_" + kv.Bucket,
		Description:       kv.Description,
		Subjects:          []string{"$KV." + kv.Bucket + ".>"},
		MaxMsgsPerSubject: 1,
		MaxBytes:          -1,
		MaxAge:            kv.TTL,
		MaxMsgSize:        -1,
		Storage:           kv.Storage,
		Replicas:          kv.Replicas,
		AllowRollup:       true,
		DenyDelete:        true,
		Duplicates:        dup,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		AllowDirect:       true,
		Discard:           jetstream.DiscardNew,
	}
	if kv.LimitMarkerTTL > 0 {
		cfg.AllowMsgTTL = true
		cfg.SubjectDeleteMarkerTTL = kv.LimitMarkerTTL
	}
	return cfg
}

// Configs returns every stream Provision makes, in the order it makes
// them: ACP_LOG, ACP_IO, the streams backing the KV buckets (KV_<bucket>),
// then ACP_NOTIFY.
// Each says explicitly what the server would fill in (unlimited is -1), so it
// reads as the server reports the stream; the files under ops/nats are these
// for a cluster (Options{Replicas: 3}).
func Configs(o Options) []jetstream.StreamConfig {
	o = o.withDefaults()
	cfgs := []jetstream.StreamConfig{LogConfig(o), IOConfig(o)}
	for _, kv := range bucketConfigs(o) {
		cfgs = append(cfgs, kvStreamConfig(kv))
	}
	cfgs = append(cfgs, NotifyConfig(o))
	for i := range cfgs {
		cfgs[i] = serverDefaults(cfgs[i])
	}
	return cfgs
}

// Provision creates ACP_LOG, ACP_IO and the KV buckets where they are
// missing, and leaves existing ones as they are: the operator owns a running
// cluster's limits. With update set, existing ones are brought to o where
// that can be done in place (the session service, which owns the streams,
// does this at start-up); a difference that cannot is an error, and then
// nothing changes. Every service calls it, so the services may start in any
// order. When everything exists as intended it only reads (stream info), so
// a service needs no right to create or update streams (Reconcile).
//
// On a cluster, a stream another service has just created answers nobody
// until its Raft group has elected a leader: reads of it time out, or find
// no stream. Provision therefore tries again, for at most ProvisionWait,
// until every stream answers, and returns at once only when a difference
// is refused.
func Provision(ctx context.Context, js jetstream.JetStream, o Options, update bool) error {
	mode := CreateMissing
	if update {
		mode = Update
	}
	ctx, cancel := context.WithTimeout(ctx, ProvisionWait)
	defer cancel()
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		err := provisionOnce(ctx, js, o, mode)
		if err == nil || errors.Is(err, ErrRefused) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
	}
}

// ProvisionWait bounds Provision's retries.
const ProvisionWait = time.Minute

// provisionOnce reconciles, then reads every stream, so that each has a
// leader when it returns. Each try has ten seconds: a read that finds no
// leader waits out its whole context.
func provisionOnce(ctx context.Context, js jetstream.JetStream, o Options, mode Mode) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := Reconcile(ctx, js, o, mode); err != nil {
		return err
	}
	for _, cfg := range Configs(o) {
		if _, err := js.Stream(ctx, cfg.Name); err != nil {
			return fmt.Errorf("stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}
