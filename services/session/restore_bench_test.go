package session_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session"
)

// BenchmarkRestore measures the prompt after an unload: the restore by the
// given tier plus a one-line turn, beside the same prompt on a loaded
// session (tier=loaded).
func BenchmarkRestore(b *testing.B) {
	for _, tc := range []struct{ tier, agent string }{
		{"loaded", "resumer"},
		{events.TierResume, "resumer"},
		{events.TierLoad, "loader"},
		{events.TierFallback, "forgetful"},
	} {
		b.Run(fmt.Sprintf("tier=%s", tc.tier), func(b *testing.B) {
			// The test agent echoes the preamble it is given, and the next
			// preamble quotes that echo: a small bound keeps it from growing.
			h := startRig(b, session.Config{MaxPreambleBytes: 4 << 10})
			ctx := b.Context()
			sid := "bench"
			if err := h.open(b, sid, events.AcpOpenSessionRequest{Agent: tc.agent}); err != nil {
				b.Fatal(err)
			}
			var lat []time.Duration
			for b.Loop() {
				if tc.tier != "loaded" {
					if _, err := rpc.Call[events.AcpUnloadSessionResponse](ctx, h.nc, events.APISubject("default", events.OpUnloadSession),
						&events.AcpUnloadSessionRequest{SessionID: &sid}, nil); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				if _, err := h.prompt(ctx, sid, "", "say hi"); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		})
	}
}
