package rpc_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/micro"

	"skein.dev/internal/buildinfo"
	"skein.dev/internal/natstest"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

func TestAddService(t *testing.T) {
	nc := natstest.Connect(t, natstest.Run(t))
	tests := []struct {
		name string
		cfg  micro.Config
		want string
	}{
		{"version filled in", micro.Config{Name: "skein-test"}, buildinfo.ServiceVersion()},
		{"version given", micro.Config{Name: "skein-test", Version: "2.0.0"}, "2.0.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, err := rpc.AddService(nc, tt.cfg)
			if err != nil {
				t.Fatalf("AddService(%+v) = %v", tt.cfg, err)
			}
			t.Cleanup(func() { svc.Stop() })
			if got := svc.Info().Version; got != tt.want {
				t.Errorf("AddService(%+v).Info().Version = %q, want %q", tt.cfg, got, tt.want)
			}
		})
	}
	if _, err := rpc.AddService(nc, micro.Config{Name: "skein-test", Version: "one"}); err == nil {
		t.Errorf("AddService with version %q = nil error, want micro's", "one")
	}
}

// A request larger than the server's max_payload is payload_too_large,
// never unavailable: a retry would fail the same way.
func TestSecurityRequestOverMaxPayload(t *testing.T) {
	nc := natstest.Connect(t, natstest.Run(t))
	content := events.JSON(`[{"type":"text","text":"` + strings.Repeat("a", int(nc.MaxPayload())) + `"}]`)
	_, err := rpc.Call[events.PromptAccepted](t.Context(), nc, events.APISubject("default", events.OpPrompt),
		&events.AcpPromptRequest{SessionID: new("s1"), Content: content}, nil)
	if e, ok := errors.AsType[*events.Error](err); !ok || e.Code != events.CodePayloadTooLarge || !strings.Contains(e.Message, "max_payload") {
		t.Errorf("a request over max_payload = %v, want %s naming max_payload", err, events.CodePayloadTooLarge)
	}
}
