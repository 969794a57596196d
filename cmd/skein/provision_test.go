package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"skein.dev/internal/natstest"
	"skein.dev/pkg/events/eventlog"
	"skein.dev/pkg/events/streams"
	"skein.dev/services/history"
	"skein.dev/services/session"
)

// withUsers gives the server two users: admin, who may do anything, and
// svc, who may not create or update streams (nor delete them): what an
// operator gives the services once skein provision has run.
func withUsers() natstest.Option {
	return func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "svc", Password: "svc", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{
					Allow: []string{">"},
					Deny:  []string{"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>"},
				},
			}},
		}
	}
}

// provision runs skein provision with args and returns its exit code and
// output lines.
func provision(t *testing.T, args ...string) (int, []string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(t.Context(), append([]string{"provision"}, args...), func(string) string { return "" }, strings.NewReader(""), &out, &errOut)
	if code != 0 {
		t.Logf("skein provision %s: exit %d:\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	}
	return code, strings.Split(strings.TrimSpace(out.String()), "\n")
}

// wantLines checks that out has a line per stream saying what was done,
// want, and, unless the run refused or was dry, then a line per stream
// saying that it serves its consumers (lines saying what that waits for
// may come between).
func wantLines(t *testing.T, out []string, want string) {
	t.Helper()
	streams := streams.Configs(streams.Options{})
	if len(out) < len(streams) {
		t.Fatalf("skein provision printed %q, want a line per stream", out)
	}
	for i, l := range out[:len(streams)] {
		if f := strings.Fields(l); len(f) < 2 || f[0] != streams[i].Name || !strings.HasPrefix(strings.Join(f[1:], " "), want) {
			t.Errorf("skein provision line %q, want %s %q", l, streams[i].Name, want)
		}
	}
	var serving []string
	for _, l := range out[len(streams):] {
		if f := strings.Fields(l); len(f) >= 2 && f[1] == "serving" {
			serving = append(serving, f[0])
		} else if len(f) < 3 || f[1] != "waiting" {
			t.Errorf("skein provision line %q, want a stream's serving or waiting for", l)
		}
	}
	if strings.HasPrefix(want, "refused") || strings.HasPrefix(want, "would") {
		if len(serving) > 0 {
			t.Errorf("skein provision waited for %q to serve after %s", serving, want)
		}
		return
	}
	for i, s := range streams {
		if i >= len(serving) || serving[i] != s.Name {
			t.Errorf("skein provision says %q serve, want every stream, in order: %q", serving, out)
			break
		}
	}
}

// TestProvisionThenStartWithoutCreateRights: skein provision, run as an
// admin, creates everything, then finds everything unchanged; the history
// and session services then start as a user that cannot create or update
// a stream.
func TestProvisionThenStartWithoutCreateRights(t *testing.T) {
	ns := natstest.Run(t, natstest.WithListen(), withUsers())
	adminURL := "nats://admin:admin@" + strings.TrimPrefix(ns.ClientURL(), "nats://")
	// The user really has no rights to create: on an empty server, a
	// service cannot start. The server answers a denied request with an
	// asynchronous permissions violation, not a reply: it ends the wait.
	violations := make(chan error, 1)
	probe := natstest.Connect(t, ns, nats.UserInfo("svc", "svc"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case violations <- err:
		default:
		}
	}))
	js, err := jetstream.New(probe)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	go func() {
		select {
		case err := <-violations:
			cancel(err)
		case <-ctx.Done():
		}
	}()
	err = streams.Provision(ctx, js, streams.Options{}, false)
	cause := context.Cause(ctx)
	cancel(nil)
	if err == nil || !errors.Is(cause, nats.ErrPermissionViolation) {
		t.Fatalf("Provision as svc on an empty server = %v (cause %v), want it ended by a permissions violation", err, cause)
	}
	svc := natstest.Connect(t, ns, nats.UserInfo("svc", "svc"))

	code, out := provision(t, "--nats", adminURL)
	if code != 0 {
		t.Fatalf("skein provision: exit %d, out %q", code, out)
	}
	wantLines(t, out, "created")
	code, out = provision(t, "--nats", adminURL)
	if code != 0 {
		t.Fatalf("second skein provision: exit %d, out %q", code, out)
	}
	wantLines(t, out, "unchanged")

	lg := slog.New(slog.DiscardHandler)
	hist, err := history.New(history.Config{}, lg, svc, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(session.Config{}, lg, svc, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(t.Context())
	defer stop()
	errs := make(chan error, 2)
	go func() { errs <- hist.Run(runCtx) }()
	go func() { errs <- sess.Run(runCtx) }()
	for name, ready := range map[string]<-chan struct{}{"history": hist.Ready(), "session": sess.Ready()} {
		select {
		case <-ready:
		case err := <-errs:
			t.Fatalf("a service stopped before %s was ready: %v", name, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s not ready after 10s", name)
		}
	}
	stop()
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	}
}

// TestProvisionRefusesAndDryRun: a change that cannot be made in place
// (replicas) is reported on every line it concerns, exits 1 and changes
// nothing; a dry run reports an update without making it.
func TestProvisionRefusesAndDryRun(t *testing.T) {
	ns := natstest.Run(t, natstest.WithListen())
	url := ns.ClientURL()
	if code, out := provision(t, "--nats", url); code != 0 {
		t.Fatalf("skein provision: exit %d, out %q", code, out)
	}

	code, out := provision(t, "--nats", url, "--replicas", "3", "--session.max-events-per-session", "5")
	if code != 1 {
		t.Errorf("skein provision --replicas 3: exit %d, want 1", code)
	}
	wantLines(t, out, "refused: ")
	for _, l := range out {
		if !strings.Contains(l, "num_replicas 1 -> 3 (refused: ") {
			t.Errorf("line %q does not say replicas are refused", l)
		}
	}

	if code, _ := provision(t, "--nats", url, "--dry-run", "--replicas", "3"); code != 1 {
		t.Errorf("skein provision --dry-run --replicas 3: exit %d, want 1", code)
	}
	code, out = provision(t, "--nats", url, "--dry-run", "--session.max-events-per-session", "5")
	if code != 0 {
		t.Errorf("skein provision --dry-run: exit %d, want 0", code)
	}
	if want := "ACP_LOG          would update: max_msgs_per_subject 1000000 -> 5"; out[0] != want {
		t.Errorf("dry run line %q, want %q", out[0], want)
	}

	nc := natstest.Connect(t, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(t.Context(), "ACP_LOG")
	if err != nil {
		t.Fatal(err)
	}
	if got := str.CachedInfo().Config.MaxMsgsPerSubject; got != eventlog.DefaultMaxEventsPerSession {
		t.Errorf("ACP_LOG max msgs per subject = %d after a refused run and a dry run, want %d", got, eventlog.DefaultMaxEventsPerSession)
	}
}
