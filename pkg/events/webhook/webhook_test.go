package webhook_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/webhook"
)

// TestSignStandardWebhooksVector: the signature of the Standard Webhooks
// reference libraries' test vector.
func TestSignStandardWebhooksVector(t *testing.T) {
	got, err := webhook.Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
	if _, err := webhook.Sign("nope", "msg_1", 1, nil); err == nil {
		t.Error("Sign accepted a secret without whsec_")
	}
}

func TestNewSecretAndID(t *testing.T) {
	s := webhook.NewSecret()
	if !strings.HasPrefix(s, webhook.SecretPrefix) {
		t.Errorf("secret %q", s)
	}
	if _, err := webhook.Sign(s, "msg_1", 1, []byte("{}")); err != nil {
		t.Error(err)
	}
	if id := webhook.NewID(); !webhook.ValidID(id) || id == webhook.NewID() {
		t.Errorf("ID %q", id)
	}
}

func TestGuardPermits(t *testing.T) {
	var g webhook.Guard
	for _, tc := range []struct {
		ip   string
		want bool
	}{
		{"93.184.216.34", true}, {"2606:2800:220:1:248:1893:25c8:1946", true},
		{"127.0.0.1", false}, {"::1", false}, {"10.0.0.1", false}, {"172.16.5.4", false}, {"192.168.1.1", false},
		{"169.254.169.254", false}, {"100.100.100.200", false}, {"0.0.0.0", false}, {"::", false},
		{"fd00:ec2::254", false}, {"fe80::1", false}, {"::ffff:127.0.0.1", false}, {"::ffff:10.0.0.1", false},
		{"224.0.0.1", false}, {"ff02::1", false},
	} {
		if got := g.Permits(netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("Permits(%s) = %v, want %v", tc.ip, got, tc.want)
		}
	}
	allow, err := webhook.ParseAllow("127.0.0.0/8, 10.1.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	g.Allow = allow
	if !g.Permits(netip.MustParseAddr("127.0.0.1")) || !g.Permits(netip.MustParseAddr("10.1.2.3")) || g.Permits(netip.MustParseAddr("10.2.0.1")) {
		t.Error("the allow-list is not applied")
	}
	if _, err := webhook.ParseAllow("10.0.0.0/33"); err == nil {
		t.Error("ParseAllow accepted a bad CIDR")
	}
	if err := g.Control("tcp", "10.2.0.1:443", nil); !errors.Is(err, webhook.ErrRefusedAddress) {
		t.Errorf("Control = %v, want ErrRefusedAddress", err)
	}
	if err := g.Control("tcp", "127.0.0.1:443", nil); err != nil {
		t.Errorf("Control of an allowed address: %v", err)
	}
}

func TestParseCreate(t *testing.T) {
	w, err := webhook.ParseCreate([]byte(`{"url":"https://example.com/h?x=1","events":["turn.finished","session.waiting"],"delay":"90s"}`))
	if err != nil {
		t.Fatal(err)
	}
	if w.Delay != 90*time.Second || strings.Join(w.Events, ",") != "session.waiting,turn.finished" {
		t.Errorf("%+v", w)
	}
	_, err = webhook.ParseCreate([]byte(`{"url":"https://example.com","events":["x"]}`))
	if e := events.AsError(err); e.Code != events.CodeInvalidRequest {
		t.Errorf("unknown type: %v", err)
	}
}

// FuzzParseCreate: any body is a webhook that reads back as written, or
// a typed error; never a panic.
func FuzzParseCreate(f *testing.F) {
	for _, s := range []string{
		`{"url":"https://example.com/h","events":["turn.finished"]}`,
		`{"url":"http://[::1]:80/x","events":["session.waiting"],"delay":"5m"}`,
		`{"url":"","events":null}`, `[]`, `{"url":"https://a","events":["turn.failed","turn.failed"]}`, `{} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		w, err := webhook.ParseCreate(body)
		if err != nil {
			if c := events.AsError(err).Code; c != events.CodeInvalidRequest && c != events.CodePayloadTooLarge {
				t.Fatalf("error code %s: %v", c, err)
			}
			return
		}
		if len(w.Events) == 0 || len(w.URL) > webhook.MaxURLBytes || w.Delay < 0 || w.Delay > webhook.MaxDelay {
			t.Fatalf("accepted %+v", w)
		}
		w.ID, w.Namespace, w.Secret = webhook.NewID(), "default", webhook.NewSecret()
		data, err := w.Encode()
		if err != nil {
			t.Fatal(err)
		}
		back, err := webhook.Decode(data)
		if err != nil || back.URL != w.URL || strings.Join(back.Events, ",") != strings.Join(w.Events, ",") || back.Delay != w.Delay {
			t.Fatalf("read back %+v, %v; wrote %+v", back, err, w)
		}
	})
}
