package cli_test

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"skein.dev/cmd/skein/internal/cli"
	"skein.dev/internal/testutil"
	"skein.dev/services/gateway"
)

// TestToken: the commands find their bearer token as skein dev leaves it,
// in <data dir>/dev-token, and SKEIN_TOKEN and --token override it.
func TestToken(t *testing.T) {
	const devToken, otherToken = "dev-token-value", "other-token-value"
	e := newEnv(t, withTokens(
		gateway.Token{SHA256: gateway.HashToken(devToken), Principal: "dev", Namespaces: []string{"default"}, Role: gateway.RoleAdmin},
		gateway.Token{SHA256: gateway.HashToken(otherToken), Principal: "other", Namespaces: []string{"default"}, Role: gateway.RoleUser},
	))

	data, empty := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(data, cli.DevTokenFile), []byte(devToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		ok   bool
	}{
		{"the dev token file", map[string]string{cli.EnvData: data}, nil, true},
		{"no token anywhere", map[string]string{cli.EnvData: empty}, nil, false},
		{"SKEIN_TOKEN without a file", map[string]string{cli.EnvData: empty, cli.EnvToken: otherToken}, nil, true},
		{"SKEIN_TOKEN over the file", map[string]string{cli.EnvData: data, cli.EnvToken: "wrong"}, nil, false},
		{"--token over SKEIN_TOKEN", map[string]string{cli.EnvData: empty, cli.EnvToken: "wrong"}, []string{"--token", devToken}, true},
		{"a wrong --token", map[string]string{cli.EnvData: data}, []string{"--token", "wrong"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{cli.EnvServer: e.url}
			maps.Copy(env, tt.env)
			for _, cmd := range [][]string{{"agents"}, {"prompt", "-s", "tok", "hello"}, {"history", "-s", "tok"}} {
				var stdout, stderr testutil.Buffer
				err := execute(t.Context(), env, "", &stdout, &stderr, append(cmd, tt.args...)...)
				if tt.ok && err != nil {
					t.Fatalf("%v: %v\nstderr: %s", cmd, err, stderr.String())
				}
				if !tt.ok {
					wantCode(t, err, "unauthenticated")
					if hint := strings.Contains(err.Error(), "no token was sent"); hint != (tt.name == "no token anywhere") {
						t.Errorf("%v: %v: a hint where to find a token: %v, want it only when none was sent", cmd, err, hint)
					}
					// The error names the gateway and where the token came from.
					if !strings.Contains(err.Error(), "[gateway "+e.url+", token: ") {
						t.Errorf("%v: %v: want the gateway and the token's source named", cmd, err)
					}
				}
				for _, secret := range []string{devToken, otherToken} {
					if strings.Contains(stdout.String()+stderr.String(), secret) {
						t.Errorf("%v printed a token", cmd)
					}
				}
			}
		})
	}
}
