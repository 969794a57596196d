package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Mode says what Reconcile may change.
type Mode int

const (
	// CreateMissing creates the streams that do not exist and leaves the
	// others as they are, even where they differ from the intended
	// configuration. It is what every service does at start.
	CreateMissing Mode = iota
	// Update also brings existing streams to the intended configuration
	// where that can be done in place. When any difference cannot, it
	// changes nothing at all: not even what is missing is created.
	Update
	// DryRun reads only, and reports what Update would do (ErrRefused
	// included).
	DryRun
)

// Action is what Reconcile does, or would do, to one stream.
type Action string

const (
	ActionCreate    Action = "create"
	ActionUpdate    Action = "update"
	ActionUnchanged Action = "unchanged"
	// ActionKept is an existing stream that differs from the intended
	// configuration, left as it is (CreateMissing).
	ActionKept Action = "kept"
	// ActionRefused is an existing stream with a difference the server
	// cannot apply in place (Change.Refused says why).
	ActionRefused Action = "refused"
)

// Change is one field of a stream's configuration that differs from the
// intended one. Field is its name in the JetStream API's JSON (the names
// `nats stream info --json` and the files under ops/nats use); Have and Want
// are its JSON values, nil when absent.
type Change struct {
	Field      string
	Have, Want any
	// Refused says why the change cannot be applied in place; empty when
	// it can.
	Refused string
}

// Result is the outcome of reconciling one stream.
type Result struct {
	Stream  string
	Action  Action
	Changes []Change
	// Done is set when Action was carried out (a create or an update in a
	// mode that makes it).
	Done bool
}

// ErrRefused is returned by Reconcile in Update (and DryRun) mode when some
// difference cannot be applied in place; then nothing was changed.
var ErrRefused = errors.New("a difference cannot be applied in place")

// Reconcile compares every stream of Configs(o) (the KV buckets as
// their backing streams) with the one on the server, and creates or updates
// them as mode allows. It returns one Result per stream, in Configs'
// order, also alongside ErrRefused.
//
// Reading a stream is a STREAM.INFO request; Reconcile sends STREAM.CREATE
// only for a missing stream and STREAM.UPDATE only for one that differs in
// Update mode. So a service started against provisioned streams needs no
// right to create or update them.
//
// A stream's persist mode is fixed when it is created, and Reconcile keeps
// the one it has: ACP_IO made before it wrote behind stays as it is.
func Reconcile(ctx context.Context, js jetstream.JetStream, o Options, mode Mode) ([]Result, error) {
	wants := Configs(o)
	results := make([]Result, len(wants))
	var refused []string
	for i := range wants {
		r, err := plan(ctx, js, &wants[i], mode)
		if err != nil {
			return nil, err
		}
		results[i] = r
		if r.Action == ActionRefused {
			refused = append(refused, describeRefused(r))
		}
	}
	if len(refused) > 0 && mode != CreateMissing {
		return results, fmt.Errorf("%w: %s", ErrRefused, strings.Join(refused, "; "))
	}
	if mode == DryRun {
		return results, nil
	}
	for i := range results {
		r, err := apply(ctx, js, wants[i], results[i], mode)
		if err != nil {
			return results, err
		}
		results[i] = r
	}
	return results, nil
}

// plan reads the stream want names and says what mode does to it. It
// fills in want's persist mode from the existing stream.
func plan(ctx context.Context, js jetstream.JetStream, want *jetstream.StreamConfig, mode Mode) (Result, error) {
	r := Result{Stream: want.Name}
	str, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		r.Action = ActionCreate
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("stream %s: %w", want.Name, err)
	}
	have := str.CachedInfo().Config
	want.PersistMode = have.PersistMode
	r.Changes, err = diffConfig(have, *want)
	if err != nil {
		return r, fmt.Errorf("stream %s: %w", want.Name, err)
	}
	switch {
	case len(r.Changes) == 0:
		r.Action = ActionUnchanged
	case mode == CreateMissing:
		r.Action = ActionKept
	case slices.ContainsFunc(r.Changes, func(c Change) bool { return c.Refused != "" }):
		r.Action = ActionRefused
	default:
		r.Action = ActionUpdate
	}
	return r, nil
}

// apply carries out r. A stream created by someone else since plan read
// it (another service starting) is planned again, once.
func apply(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, r Result, mode Mode) (Result, error) {
	switch r.Action {
	case ActionCreate:
		_, err := js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			if r, err = plan(ctx, js, &want, mode); err != nil {
				return r, err
			}
			if r.Action == ActionRefused {
				return r, fmt.Errorf("%w: %s", ErrRefused, describeRefused(r))
			}
			return apply(ctx, js, want, r, mode)
		}
		if err != nil {
			return r, fmt.Errorf("create stream %s: %w", want.Name, err)
		}
		r.Done = true
	case ActionUpdate:
		if _, err := js.UpdateStream(ctx, want); err != nil {
			return r, fmt.Errorf("update stream %s: %w", want.Name, err)
		}
		r.Done = true
	}
	return r, nil
}

// String reads "field have -> want", the values as JSON ("-" when absent).
func (c Change) String() string {
	return c.Field + " " + jsonText(c.Have) + " -> " + jsonText(c.Want)
}

func describeRefused(r Result) string {
	var b strings.Builder
	b.WriteString(r.Stream)
	for _, c := range r.Changes {
		if c.Refused != "" {
			fmt.Fprintf(&b, " %s (%s)", c, c.Refused)
		}
	}
	return b.String()
}

// jsonText prints a JSON value as JSON, "-" when absent.
func jsonText(v any) string {
	if v == nil {
		return "-"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// serverDefaults fills in what the server sets when a configuration leaves
// it zero, so an intended configuration compares equal to the stream made
// from it.
func serverDefaults(cfg jetstream.StreamConfig) jetstream.StreamConfig {
	for _, p := range []*int64{&cfg.MaxMsgs, &cfg.MaxBytes, &cfg.MaxMsgsPerSubject} {
		if *p == 0 {
			*p = -1
		}
	}
	if cfg.MaxMsgSize == 0 {
		cfg.MaxMsgSize = -1
	}
	if cfg.MaxConsumers == 0 {
		cfg.MaxConsumers = -1
	}
	if cfg.Duplicates == 0 {
		cfg.Duplicates = DefaultDuplicateWindow
		if cfg.MaxAge > 0 && cfg.MaxAge < cfg.Duplicates {
			cfg.Duplicates = cfg.MaxAge
		}
	}
	return cfg
}

// diffConfig returns the fields in which have, a stream's configuration as
// the server reports it, differs from want, each classified by whether the
// server applies it in place (nats-server's configUpdateCheck). Metadata the
// server keeps for itself (keys "_nats.*") is not compared. A field one side
// leaves out equals the other's zero value.
func diffConfig(have, want jetstream.StreamConfig) ([]Change, error) {
	want = serverDefaults(want)
	have.Metadata = ownMetadata(have.Metadata)
	want.Metadata = ownMetadata(want.Metadata)
	h, err := jsonFields(have)
	if err != nil {
		return nil, err
	}
	w, err := jsonFields(want)
	if err != nil {
		return nil, err
	}
	var fields []string
	for k := range h {
		fields = append(fields, k)
	}
	for k := range w {
		if _, ok := h[k]; !ok {
			fields = append(fields, k)
		}
	}
	slices.Sort(fields)
	var changes []Change
	for _, f := range fields {
		hv, wv := h[f], w[f]
		if isZero(hv) && isZero(wv) || reflect.DeepEqual(hv, wv) {
			continue
		}
		changes = append(changes, Change{Field: f, Have: hv, Want: wv, Refused: refusal(f, hv, wv)})
	}
	return changes, nil
}

// refusal says why the server does not change field from have to want in
// place, or "" when it does. Replicas it could change in a cluster, but that
// moves the stream's data between servers: an operator's decision, not a
// start-up's (`nats stream edit --replicas`).
func refusal(field string, have, want any) string {
	turnedOff := have == true && want != true
	switch field {
	case "storage":
		return "the storage type is fixed when a stream is created"
	case "num_replicas":
		return "replicas move the stream's data; change them with nats stream edit --replicas"
	case "retention":
		return "changing the retention policy changes what the stream keeps"
	case "mirror":
		return "a stream's mirror is fixed when it is created"
	case "allow_msg_counter":
		return "the message counter setting is fixed when a stream is created"
	case "persist_mode":
		return "the persist mode is fixed when a stream is created"
	case "sealed":
		if turnedOff {
			return "a sealed stream cannot be unsealed"
		}
	case "deny_delete", "deny_purge", "allow_msg_ttl", "allow_msg_schedules":
		if turnedOff {
			return "the server does not turn this off once it is on"
		}
	}
	return ""
}

func ownMetadata(m map[string]string) map[string]string {
	var own map[string]string
	for k, v := range m {
		if strings.HasPrefix(k, "_nats.") {
			continue
		}
		if own == nil {
			own = make(map[string]string)
		}
		own[k] = v
	}
	return own
}

// jsonFields returns cfg's fields as the JetStream API's JSON has them.
func jsonFields(cfg jetstream.StreamConfig) (map[string]any, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	err = json.Unmarshal(b, &m)
	return m, err
}

func isZero(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case float64:
		return v == 0
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	case map[string]any:
		for _, e := range v {
			if !isZero(e) {
				return false
			}
		}
		return true
	}
	return false
}
