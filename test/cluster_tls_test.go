package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/internal/cluster"
	"skein.dev/pkg/events/streams"
)

// TestClusterTLS runs make cluster's topology on node-tls.conf: routes and
// clients over TLS, both sides verified. The nodes form the cluster over
// route TLS (the R3 streams are provisioned), a turn runs through every
// service (skein serve and skein provision with --nats-tls-ca/cert/key),
// and a client that speaks plain text, or TLS without a certificate the
// CA signed, is refused. An edge runner joins the leafnodes listener over
// TLS.
func TestClusterTLS(t *testing.T) {
	c := startCluster(t, cluster.Options{TLS: true})
	ctx := t.Context()
	if c.TLS == nil || !strings.HasPrefix(c.URL(cluster.UserOps), "tls://") {
		t.Fatalf("a TLS cluster's URL is %s", c.URL(cluster.UserOps))
	}

	base := c.HTTP[0] + "/v1/sessions/"
	if code, body := clusterDo(ctx, c, http.MethodPut, base+"s1", `{"agent":"test"}`); code != http.StatusOK {
		t.Fatalf("open: %d %s", code, body)
	}
	code, body := clusterDo(ctx, c, http.MethodPost, base+"s1/prompt", `{"content":[{"type":"text","text":"say hello over TLS"}]}`)
	if code != http.StatusOK || !strings.Contains(string(body), "end_turn") {
		t.Fatalf("prompt: %d %s", code, body)
	}

	// Every node requires TLS of clients and of routes, and verifies both.
	for _, p := range c.MonitorPorts {
		var varz struct {
			TLSRequired bool `json:"tls_required"`
			TLSVerify   bool `json:"tls_verify"`
			Cluster     struct {
				TLSRequired bool `json:"tls_required"`
				TLSVerify   bool `json:"tls_verify"`
			} `json:"cluster"`
			Leaf struct {
				TLSRequired bool `json:"tls_required"`
			} `json:"leaf"`
		}
		tlsGetJSON(t, fmt.Sprintf("http://127.0.0.1:%d/varz", p), &varz)
		if !varz.TLSRequired || !varz.TLSVerify || !varz.Cluster.TLSRequired || !varz.Cluster.TLSVerify || !varz.Leaf.TLSRequired {
			t.Errorf("node on %d: /varz says %+v, want TLS required and verified for clients and routes, and required for leaf nodes", p, varz)
		}
	}

	// A client with the CA and a client certificate reads the streams.
	ops, err := nats.Connect(c.URL(cluster.UserOps), nats.RootCAs(c.TLS.CA), nats.ClientCert(c.TLS.ClientCert, c.TLS.ClientKey))
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	if _, err := ops.Request("$JS.API.STREAM.INFO.ACP_LOG", nil, 10*time.Second); err != nil {
		t.Errorf("stream info over TLS: %v", err)
	}

	// skein provision takes the TLS files from the environment as well
	// (SKEIN_NATS_TLS_*): a dry run finds everything provisioned.
	env := map[string]string{
		"NATS_URL": c.URL(cluster.UserOps), "SKEIN_NATS_TLS_CA": c.TLS.CA,
		"SKEIN_NATS_TLS_CERT": c.TLS.ClientCert, "SKEIN_NATS_TLS_KEY": c.TLS.ClientKey,
	}
	if code, out, errOut := runSkein(t, env, "provision", "--replicas=3", "--dry-run"); code != exitOK {
		t.Errorf("skein provision --dry-run over TLS: exit %d\n%s%s", code, out, errOut)
	} else if strings.Count(out, "unchanged") != len(streams.Configs(streams.Options{})) {
		t.Errorf("skein provision --dry-run over TLS:\n%s", out)
	}
	if code, _, errOut := runSkein(t, nil, "provision", "--nats="+c.URL(cluster.UserOps), "--nats-tls-cert="+c.TLS.ClientCert); code == exitOK || !strings.Contains(errOut, "go together") {
		t.Errorf("a client certificate without its key: exit %d, %s", code, errOut)
	}

	// An edge runner joins over TLS, checking the nodes' certificate
	// against the CA (SKEIN_TLS_CA), with what make cluster's env file
	// gives skein provision runner: the system user's URL and the TLS
	// files, for its reload.
	edge := clusterEnv(t, c)
	creds := filepath.Join(t.TempDir(), "laptop.creds")
	if code, out, errOut := runSkein(t, edge, "provision", "runner", "laptop", "--out", creds); code != exitOK || strings.Count(out, ": reloaded") != 3 {
		t.Errorf("skein provision runner over TLS: exit %d\n%s%s", code, out, errOut)
	} else {
		startEdgeRunner(t, skeinBin(t), edge, filepath.Join(t.TempDir(), "laptop"), "--creds", creds)
		for _, l := range edgeLeafs(t, c) {
			t.Logf("leaf %s", l.Name)
		}
	}

	// Without a client certificate: refused in the handshake.
	if nc, err := nats.Connect(c.URL(cluster.UserOps), nats.RootCAs(c.TLS.CA), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("a TLS client without a certificate connected")
	}

	// In plain text: the server's INFO says TLS is required, and a
	// CONNECT and PING sent in the clear get no PONG, only the end of the
	// connection.
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.ClientPorts[0]), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(info, "INFO ") || !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("the server's greeting: %q, %v; want an INFO requiring TLS", info, err)
	}
	connect := fmt.Sprintf("CONNECT {\"user\":%q,\"pass\":%q,\"verbose\":false,\"tls_required\":false}\r\nPING\r\n", cluster.UserOps, c.Passwords[cluster.UserOps])
	if _, err := io.WriteString(conn, connect); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r)
	if strings.Contains(string(rest), "PONG") {
		t.Errorf("a plain-text client was answered: %q", rest)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("the server kept a plain-text client's connection open: %q", rest)
	}
}

func tlsGetJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}
