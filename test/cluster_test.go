package test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/internal/cluster"
	"skein.dev/internal/testutil"
)

// opsClusterDir is ops/cluster/nats, the configuration make cluster runs.
const opsClusterDir = "../ops/cluster/nats"

// startCluster starts make cluster's topology on free loopback ports: three
// nats-server processes built from the version go.mod pins, configured by
// ops/cluster/nats, and the services as skein serve processes (the skein
// binary, skeinBin), each its own NATS user. It is stopped when
// the test ends, and the test fails if a node logged a permission
// violation: the services must live within their accounts.conf rights.
func startCluster(tb testing.TB, o cluster.Options) *cluster.Cluster {
	tb.Helper()
	c, err := cluster.Start(tb.Context(), clusterOptions(tb, o))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Stop()
		if v := serviceViolations(c); len(v) > 0 {
			tb.Errorf("services refused by their permissions (ops/cluster/nats/accounts.conf):\n%s", strings.Join(v, "\n"))
		}
		if tb.Failed() {
			for _, p := range append(c.Nodes, c.Services...) {
				tb.Logf("--- %s's log (tail):\n%s", p.Name, p.Tail(3000))
			}
		}
	})
	return c
}

// clusterOptions completes o for a test's cluster: a temporary directory,
// ops/cluster/nats, nats-server built at the pinned version, and the skein
// binary. It skips tb where a cluster cannot run.
func clusterOptions(tb testing.TB, o cluster.Options) cluster.Options {
	tb.Helper()
	if testing.Short() {
		tb.Skip("starts a three-node cluster of processes; skipped in -short")
	}
	if runtime.GOOS != "linux" {
		tb.Skip("the cluster's processes are tied to the test's life on Linux only")
	}
	exe := skeinBin(tb)
	o.Dir = tb.TempDir()
	testutil.SearchableAbove(o.Dir) // for the adapters' user of a runner run as root
	o.ConfDir, _ = filepath.Abs(opsClusterDir)
	o.NATSServer = buildNATSServer(tb)
	o.Skein = []string{exe}
	// The tests drive the built-in test agent, which serve offers only
	// when asked.
	o.TestAgents = true
	return o
}

// serviceViolations returns the permission violations of the services'
// users (skein-gateway, skein-session, ...), not of the test's own.
func serviceViolations(c *cluster.Cluster) []string {
	var out []string
	for _, v := range c.Violations() {
		if strings.Contains(v, "/user:skein-") {
			out = append(out, v)
		}
	}
	return out
}

// buildNATSServer builds nats-server at the version this module pins, as
// make nats-server installs it.
func buildNATSServer(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		tb.Fatalf("build nats-server: %v\n%s", err, out)
	}
	return bin
}

// TestCluster runs a turn on make cluster's topology: R3 streams on three
// nodes, every service its own process and NATS user. The reader user
// follows namespace default live and is refused everything else.
func TestCluster(t *testing.T) {
	c := startCluster(t, cluster.Options{})
	ctx := t.Context()

	// The reader follows the namespace's tail, over NATS, while a client
	// prompts over HTTP.
	reader, err := nats.Connect(c.URL(cluster.UserReader), nats.CustomInboxPrefix("_INBOX.reader-default"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	tail, err := reader.SubscribeSync("acp.tail.default.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.FlushWithContext(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}

	base := c.HTTP[0] + "/v1/sessions/"
	if code, body := clusterDo(ctx, c, http.MethodPut, base+"s1", `{"agent":"test"}`); code != http.StatusOK {
		t.Fatalf("open: %d %s", code, body)
	}
	code, body := clusterDo(ctx, c, http.MethodPost, base+"s1/prompt", `{"content":[{"type":"text","text":"say hello from the cluster"}]}`)
	if code != http.StatusOK || !strings.Contains(string(body), "end_turn") {
		t.Fatalf("prompt: %d %s", code, body)
	}
	if _, err := tail.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("the reader saw nothing on acp.tail.default.>: %v", err)
	}

	// Every stream and bucket is R3.
	ops, err := nats.Connect(c.URL(cluster.UserOps))
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	for _, stream := range []string{"ACP_LOG", "ACP_IO", "KV_ACP_SESSIONS", "KV_ACP_OWNERS", "KV_ACP_RUNNERS"} {
		msg, err := ops.Request("$JS.API.STREAM.INFO."+stream, nil, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Config struct {
				Replicas int `json:"num_replicas"`
			} `json:"config"`
		}
		if err := json.Unmarshal(msg.Data, &info); err != nil || info.Config.Replicas != 3 {
			t.Errorf("%s: replicas %d (%v), want 3", stream, info.Config.Replicas, err)
		}
	}

	// The reader may get the last record of its namespace's subjects, and
	// nothing else: another namespace's, a get by sequence, an append.
	if _, err := reader.Request("$JS.API.DIRECT.GET.ACP_LOG.acp.log.default.s1.ev", nil, 10*time.Second); err != nil {
		t.Errorf("reader: direct get of its namespace: %v", err)
	}
	violations := len(c.Violations())
	for _, subject := range []string{"$JS.API.DIRECT.GET.ACP_LOG.acp.log.other.s1.ev", "$JS.API.DIRECT.GET.ACP_LOG", "acp.log.default.s1.ev", "acp.api.default.prompt"} {
		if _, err := reader.Request(subject, []byte(`{"seq":1}`), 500*time.Millisecond); err == nil {
			t.Errorf("reader: a request to %s was answered", subject)
		}
	}
	if _, err := reader.SubscribeSync("acp.tail.other.>"); err != nil {
		t.Fatal(err)
	}
	_ = reader.FlushWithContext(ctxTimeout(t, 10*time.Second))
	if got := len(c.Violations()) - violations; got < 5 {
		t.Errorf("the nodes logged %d permission violations for the reader's 5 refused operations", got)
	}
}

// clusterDo sends a request with the cluster's admin token and returns the
// status and body (0 if there was no answer).
func clusterDo(ctx context.Context, c *cluster.Cluster, method, url, body string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
