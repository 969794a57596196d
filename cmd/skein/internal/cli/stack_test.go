package cli_test

import (
	"log/slog"
	"net/http/httptest"
	"testing"

	"skein.dev/internal/natstest"
	"skein.dev/internal/stacktest"
	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
	"skein.dev/services/gateway"
)

// The commands are tested against a real gateway, served over HTTP, in
// front of the real session, history and adapter-runner services on an
// embedded NATS server (stacktest), with the test agent (testagent) as
// the agents: this test binary, which TestMain makes the agent when the
// runner starts it.

func TestMain(m *testing.M) { stacktest.Main(m, nil) }

// env is the gateway and the services behind it. Its open opens a
// session through the CLI; the stack's Open does over NATS.
type env struct {
	*stacktest.Stack
	t   *testing.T
	url string
}

type envOptions struct {
	stack []stacktest.Option
	// tokens, when set, are the gateway's bearer tokens.
	tokens []gateway.Token
}

// newEnv starts the services and a gateway in front of them until the
// test ends. Besides the stack's "demo" and "plain", the runner offers
// "other", whose command is not installed.
func newEnv(t *testing.T, opts ...func(*envOptions)) *env {
	t.Helper()
	o := envOptions{stack: []stacktest.Option{stacktest.WithAgents(adapterrunner.Agent{ID: "other", Command: "skein-no-such-agent"})}}
	for _, opt := range opts {
		opt(&o)
	}
	e := &env{Stack: stacktest.Start(t, o.stack...), t: t}
	lg := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := gateway.DefaultConfig()
	cfg.Auth.Tokens = o.tokens
	// The tests send many requests without a valid token from loopback,
	// which the backoff would start refusing (429): a valid token never
	// clears it.
	cfg.AuthFailuresFree = 1 << 20
	gw, err := gateway.New(cfg, lg, natstest.Connect(t, e.Server()), nil)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	hs := httptest.NewServer(gw.Handler())
	t.Cleanup(hs.Close)
	e.url = hs.URL
	return e
}

// withoutBackend runs the gateway alone: a test serves the ops it needs
// with answerWith.
func withoutBackend(o *envOptions) { o.stack = append(o.stack, stacktest.WithoutServices()) }

// withMaxEvents makes ACP_LOG keep at most n records per subject.
func withMaxEvents(n int64) func(*envOptions) {
	return func(o *envOptions) { o.stack = append(o.stack, stacktest.WithMaxEvents(n)) }
}

func withTokens(tokens ...gateway.Token) func(*envOptions) {
	return func(o *envOptions) { o.tokens = tokens }
}

// open opens sid with agent through the CLI.
func (e *env) open(sid, agent string, args ...string) {
	e.t.Helper()
	if r := e.run(e.t.Context(), "", append([]string{"open", "-s", sid, "--agent", agent}, args...)...); r.err != nil {
		e.t.Fatalf("open %s: %v\nstderr: %s", sid, r.err, r.stderr)
	}
}

// answerWith serves op, answering every request with answer (an error,
// or a reply), until the test ends. It stands in for the session service,
// in an env without one (withoutBackend), where a test shows how the CLI
// renders an answer the real services give only in a fault or a race.
func (e *env) answerWith(op events.Op, answer any) {
	e.t.Helper()
	stacktest.AnswerWith(e.t, e.Conn(), op, answer)
}
