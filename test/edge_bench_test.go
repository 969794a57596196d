package test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/internal/cluster"
	"skein.dev/internal/testutil"
	"skein.dev/pkg/client"
	"skein.dev/pkg/events"
)

// BenchmarkEdgeChunk is what the edge path costs a message chunk (issue
// 31): from the agent writing it (its stamp) to its delta on acp.live, on
// make cluster's topology, for a session placed on the cluster's own
// runner and for one placed on an edge runner of the same machine, joined
// through a leaf node (skein runner --join). The edge path adds the
// runner's outbox: each record stored in the leaf's JetStream, on the
// runner's disk, then forwarded across the leaf connection to ACP_IO and
// acknowledged. The agent writes stampsPerPrompt chunks 2 ms apart per
// prompt, as in BenchmarkUpdateLatency.
func BenchmarkEdgeChunk(b *testing.B) {
	exe := skeinBin(b)
	c := startCluster(commaFreeTB{b}, cluster.Options{})
	env := clusterEnv(b, c)
	dir := testutil.TempDir(b)
	creds := filepath.Join(dir, "laptop.creds")
	if code, out, errOut := runSkein(b, env, "provision", "runner", "laptop", "--out", creds); code != 0 {
		b.Fatalf("skein provision runner laptop: exit %d:\n%s%s", code, out, errOut)
	}
	startEdgeRunner(b, exe, env, filepath.Join(dir, "laptop"), "--creds", creds, "--id", "laptop")
	nc, err := nats.Connect(c.URL(cluster.UserOps))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	cl, err := client.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	script := fmt.Sprintf("stamp %d chunk 2ms", stampsPerPrompt)
	for _, where := range []struct{ name, runner string }{{"cluster", cluster.Runner + "-1"}, {"edge", "laptop"}} {
		b.Run("runner="+where.name, func(b *testing.B) {
			ctx := b.Context()
			sid := "chunk-" + where.name
			if err := cl.Open(ctx, sid, events.AcpOpenSessionRequest{Agent: "test", Placement: &events.Placement{Runner: new(where.runner)}}); err != nil {
				b.Fatal(err)
			}
			var s samples
			sub, err := nc.Subscribe(events.LiveSubject(events.DefaultNamespace, events.SessionID(sid)), func(m *nats.Msg) {
				got := time.Now()
				if ev, err := events.Decode[events.AcpEphemeralSessionUpdateEvent](m.Data); err == nil {
					if at, ok := sentAt(ev.Update); ok {
						s.add(got.Sub(at))
					}
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Unsubscribe()
			prompt := func() {
				resp, err := cl.PromptText(ctx, sid, script)
				if err != nil {
					b.Fatal(err)
				}
				if resp.StopReason != "end_turn" {
					b.Fatalf("a turn on %s ended %q", where.runner, resp.StopReason)
				}
			}
			prompt() // warm up: the adapter started, its first turn run
			if err := nc.Flush(); err != nil {
				b.Fatal(err)
			}
			s.reset()
			for b.Loop() {
				prompt()
			}
			if err := nc.Flush(); err != nil {
				b.Fatal(err)
			}
			s.report(b)
		})
	}
}
