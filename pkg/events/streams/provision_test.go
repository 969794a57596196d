package streams_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/events/streams"
)

var updateOps = flag.Bool("update-ops", false, "rewrite ops/nats/*.json from Configs (TestOpsStreamFiles)")

// opsNATS is the directory of the stream configurations for
// `nats stream add --config`.
const opsNATS = "../../../ops/nats"

// clusterOptions is the configuration the files under ops/nats describe: a
// three-server cluster with the default limits.
var clusterOptions = streams.Options{Replicas: 3}

// TestOpsStreamFiles keeps ops/nats/<stream>.json equal to what provision
// creates for a cluster. Run with -update-ops to rewrite them.
func TestOpsStreamFiles(t *testing.T) {
	for _, cfg := range streams.Configs(clusterOptions) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // subjects end in ">"
		enc.SetIndent("", "  ")
		if err := enc.Encode(cfg); err != nil {
			t.Fatal(err)
		}
		want := buf.Bytes()
		path := filepath.Join(opsNATS, cfg.Name+".json")
		if *updateOps {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./pkg/events/eventlog/ -run TestOpsStreamFiles -update-ops)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from Configs (run go test ./pkg/events/eventlog/ -run TestOpsStreamFiles -update-ops):\n got: %s\nwant: %s", path, got, want)
		}
	}
}

// TestBucketStreamsAsNATSMakesThem: a bucket provisioned as its backing
// stream is the stream nats.go's CreateKeyValue makes, so KeyValue and the
// nats CLI take it for a bucket, and the buckets made before provisioning
// made them as streams are unchanged.
func TestBucketStreamsAsNATSMakesThem(t *testing.T) {
	js := jetStream(t)
	o := streams.Options{}
	for _, kv := range streams.BucketConfigs(o) {
		if _, err := js.CreateKeyValue(t.Context(), kv); err != nil {
			t.Fatal(err)
		}
	}
	results, err := streams.Reconcile(t.Context(), js, o, streams.DryRun)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results[2:] {
		if r.Action != streams.ActionUnchanged && strings.HasPrefix(r.Stream, "KV_") {
			t.Errorf("%s: %s %+v, want unchanged", r.Stream, r.Action, r.Changes)
		}
	}
}

func jetStream(tb testing.TB) jetstream.JetStream {
	tb.Helper()
	js, err := jetstream.New(natstest.Connect(tb, natstest.Run(tb)))
	if err != nil {
		tb.Fatal(err)
	}
	return js
}

func actions(results []streams.Result) map[string]streams.Action {
	m := make(map[string]streams.Action)
	for _, r := range results {
		m[r.Stream] = r.Action
	}
	return m
}

func TestReconcile(t *testing.T) {
	js := jetStream(t)
	ctx := t.Context()
	o := streams.Options{MaxEventsPerSession: 10}
	results, err := streams.Reconcile(ctx, js, o, streams.Update)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Action != streams.ActionCreate || !r.Done {
			t.Errorf("first run: %s %s done=%v, want create done", r.Stream, r.Action, r.Done)
		}
	}
	if _, err := js.KeyValue(ctx, "ACP_OWNERS"); err != nil {
		t.Errorf("KeyValue(ACP_OWNERS) after provisioning: %v", err)
	}

	// Idempotent: a second run finds everything as intended.
	results, err = streams.Reconcile(ctx, js, o, streams.Update)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Action != streams.ActionUnchanged || r.Done || len(r.Changes) > 0 {
			t.Errorf("second run: %s %s %+v, want unchanged", r.Stream, r.Action, r.Changes)
		}
	}

	// A limit is applied in place; a dry run only reports it.
	o.MaxEventsPerSession = 20
	for _, mode := range []streams.Mode{streams.DryRun, streams.Update} {
		results, err = streams.Reconcile(ctx, js, o, mode)
		if err != nil {
			t.Fatal(err)
		}
		r := results[0]
		if r.Stream != "ACP_LOG" || r.Action != streams.ActionUpdate || r.Done != (mode == streams.Update) ||
			len(r.Changes) != 1 || r.Changes[0].Field != "max_msgs_per_subject" || r.Changes[0].Refused != "" {
			t.Errorf("mode %d: ACP_LOG %+v, want an update of max_msgs_per_subject", mode, r)
		}
	}
	str, err := js.Stream(ctx, "ACP_LOG")
	if err != nil {
		t.Fatal(err)
	}
	if got := str.CachedInfo().Config.MaxMsgsPerSubject; got != 20 {
		t.Errorf("ACP_LOG max msgs per subject = %d after update, want 20", got)
	}

	// A services' start leaves a stream that differs as it is.
	results, err = streams.Reconcile(ctx, js, streams.Options{}, streams.CreateMissing)
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(results)["ACP_LOG"]; got != streams.ActionKept {
		t.Errorf("CreateMissing: ACP_LOG %s, want kept", got)
	}
}

// TestReconcileRefuses: a difference the server cannot apply in place is
// reported with the others, and nothing changes, not even what is missing.
func TestReconcileRefuses(t *testing.T) {
	js := jetStream(t)
	ctx := t.Context()
	o := streams.Options{}
	if _, err := streams.Reconcile(ctx, js, o, streams.Update); err != nil {
		t.Fatal(err)
	}
	// ACP_RUNNERS on file storage instead of memory.
	for _, name := range []string{"KV_ACP_RUNNERS", "ACP_IO"} {
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	runners := streams.Configs(o)[4]
	runners.Storage = jetstream.FileStorage
	if _, err := js.CreateStream(ctx, runners); err != nil {
		t.Fatal(err)
	}
	o.MaxEventsPerSession = 7
	results, err := streams.Reconcile(ctx, js, o, streams.Update)
	if !errors.Is(err, streams.ErrRefused) {
		t.Fatalf("Reconcile = %v, want ErrRefused", err)
	}
	want := map[string]streams.Action{
		"ACP_LOG": streams.ActionUpdate, "ACP_IO": streams.ActionCreate,
		"KV_ACP_SESSIONS": streams.ActionUnchanged, "KV_ACP_OWNERS": streams.ActionUnchanged,
		"KV_ACP_RUNNERS": streams.ActionRefused, "KV_ACP_BUDGETS": streams.ActionUnchanged,
		"KV_ACP_WEBHOOKS":           streams.ActionUnchanged,
		"KV_ACP_WEBHOOK_DELIVERIES": streams.ActionUnchanged, "ACP_NOTIFY": streams.ActionUnchanged,
	}
	for _, r := range results {
		if r.Action != want[r.Stream] || r.Done {
			t.Errorf("%s: %s done=%v, want %s not done", r.Stream, r.Action, r.Done, want[r.Stream])
		}
		if r.Stream == "KV_ACP_RUNNERS" && (len(r.Changes) != 1 || r.Changes[0].Field != "storage" || r.Changes[0].Refused == "") {
			t.Errorf("KV_ACP_RUNNERS changes %+v, want storage refused", r.Changes)
		}
	}
	if _, err := js.Stream(ctx, "ACP_IO"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("ACP_IO after a refused run: %v, want not found", err)
	}
	str, err := js.Stream(ctx, "ACP_LOG")
	if err != nil {
		t.Fatal(err)
	}
	if got := str.CachedInfo().Config.MaxMsgsPerSubject; got == 7 {
		t.Errorf("ACP_LOG was updated by a refused run")
	}

	// Replicas are refused too (on one server the server would refuse
	// R3 anyway; in a cluster they move data).
	results, err = streams.Reconcile(ctx, js, streams.Options{Replicas: 3}, streams.DryRun)
	if !errors.Is(err, streams.ErrRefused) {
		t.Fatalf("Reconcile(Replicas: 3, DryRun) = %v, want ErrRefused", err)
	}
	for _, r := range results {
		if r.Stream != "KV_ACP_SESSIONS" {
			continue
		}
		if r.Action != streams.ActionRefused || len(r.Changes) != 1 || r.Changes[0].Field != "num_replicas" {
			t.Errorf("KV_ACP_SESSIONS at R3: %s %+v, want num_replicas refused", r.Action, r.Changes)
		}
	}
}
