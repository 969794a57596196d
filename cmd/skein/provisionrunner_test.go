package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"skein.dev/internal/edgeusers"
	"skein.dev/internal/testutil"
)

// provisionRunner runs skein provision runner with args, the accounts file
// accounts and no reload, and returns its exit code and output.
func provisionRunner(t *testing.T, accounts string, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr testutil.Buffer
	getenv := func(k string) string {
		if k == "SKEIN_ACCOUNTS_FILE" {
			return accounts
		}
		return ""
	}
	code := run(t.Context(), append(append([]string{"provision", "runner"}, args...), "--reload=false"), getenv, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String() + stderr.String()
}

// skein provision runner edits the accounts file: issuing a credential
// twice to the same file changes nothing, a file that is there and not
// the runner's is never written over, a credential is 0600, and revoking
// a runner that is not there fails and changes nothing.
func TestProvisionRunnerEditsTheAccountsFile(t *testing.T) {
	dir := t.TempDir()
	accounts := filepath.Join(dir, "accounts.conf")
	orig, err := os.ReadFile(filepath.Join(opsClusterDir, "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(accounts, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "laptop.creds")
	if code, out := provisionRunner(t, accounts, "laptop", "--out", creds); code != 0 || !strings.Contains(out, "runner laptop: issued") {
		t.Fatalf("provision runner laptop: exit %d\n%s", code, out)
	}
	fi, err := os.Stat(creds)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the credential is mode %v, want 0600", fi.Mode().Perm())
	}
	issued, _ := os.ReadFile(accounts)
	if code, out := provisionRunner(t, accounts, "laptop", "--out", creds); code != 0 || !strings.Contains(out, "unchanged") {
		t.Errorf("provision runner laptop again: exit %d, %s; want unchanged", code, out)
	}
	if again, _ := os.ReadFile(accounts); string(again) != string(issued) {
		t.Error("provisioning laptop again with its credential changed the accounts file")
	}
	// Another runner's credential, or anything else, at --out: refused.
	if code, out := provisionRunner(t, accounts, "desk", "--out", creds); code == 0 || !strings.Contains(out, "exists") {
		t.Errorf("provision runner desk over laptop's credential: exit %d, %s; want a refusal", code, out)
	}
	if b, _ := os.ReadFile(creds); !strings.Contains(string(b), "runner laptop") {
		t.Error("laptop's credential was written over")
	}
	// A new file for laptop: a new key, in place of the old one.
	creds2 := filepath.Join(dir, "laptop2.creds")
	if code, out := provisionRunner(t, accounts, "laptop", "--out", creds2); code != 0 || !strings.Contains(out, "the old one is revoked") {
		t.Errorf("provision runner laptop to a new file: exit %d, %s; want a new key", code, out)
	}
	b, _ := os.ReadFile(accounts)
	rs, err := edgeusers.Read(b)
	if err != nil || len(rs) != 1 {
		t.Fatalf("the accounts file's runners: %v, %v; want laptop alone", rs, err)
	}
	c2, _ := os.ReadFile(creds2)
	if cred, err := edgeusers.ParseCredential(c2); err != nil || cred.Runner != rs[0] {
		t.Errorf("the accounts file holds %v, the new credential %v (%v)", rs[0], cred.Runner, err)
	}
	// Revoking: an unknown runner fails and changes nothing; laptop goes.
	before, _ := os.ReadFile(accounts)
	if code, out := provisionRunner(t, accounts, "desk", "--revoke"); code == 0 || !strings.Contains(out, "no edge runner desk") {
		t.Errorf("revoking desk, never provisioned: exit %d, %s; want an error", code, out)
	}
	if after, _ := os.ReadFile(accounts); string(after) != string(before) {
		t.Error("revoking an unknown runner changed the accounts file")
	}
	if code, out := provisionRunner(t, accounts, "laptop", "--revoke"); code != 0 || !strings.Contains(out, "revoked") {
		t.Errorf("revoking laptop: exit %d, %s", code, out)
	}
	if after, _ := os.ReadFile(accounts); string(after) != string(orig) {
		t.Error("the accounts file after laptop was issued and revoked is not what it was")
	}
}

// What skein provision runner and skein runner refuse before they touch
// anything, each with what to do.
func TestEdgeCommandsRefuse(t *testing.T) {
	dir := t.TempDir()
	notCreds := filepath.Join(dir, "not.creds")
	if err := os.WriteFile(notCreds, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, cred, err := edgeusers.NewCredential("laptop")
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "laptop.creds")
	if err := edgeusers.WriteCredential(creds, cred); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"provision", "runner", "--out", "x"}, "name the runner"},
		{[]string{"provision", "runner", "a.b", "--out", "x", "--accounts-file", "y", "--reload=false"}, "runner ID"},
		{[]string{"provision", "runner", "laptop", "--accounts-file", "y", "--reload=false"}, "--out FILE"},
		{[]string{"provision", "runner", "laptop", "--out", "x", "--revoke", "--accounts-file", "y", "--reload=false"}, "--out FILE"},
		{[]string{"provision", "runner", "laptop", "--out", "x"}, "--accounts-file"},
		{[]string{"provision", "runner", "laptop", "--out", "x", "--accounts-file", "y"}, "--sys-nats"},
		{[]string{"runner", "--creds", notCreds}, "--join"},
		{[]string{"runner", "--join", "nats-leaf://127.0.0.1:7422"}, "--creds"},
		{[]string{"runner", "--join", "nats-leaf://127.0.0.1:7422", "--creds", notCreds}, "not a Skein edge runner's credential"},
		{[]string{"runner", "--join", "http://127.0.0.1:7422", "--creds", creds, "--data", dir}, "nats-leaf:// or tls://"},
		{[]string{"runner", "--join", "nats-leaf://u:p@127.0.0.1:7422", "--creds", creds, "--data", dir}, "not a user in the URL"},
		{[]string{"runner", "--join", "tls://127.0.0.1:7422", "--creds", creds, "--data", dir, "--tls-ca", notCreds}, "no PEM certificate"},
	} {
		var stdout, stderr testutil.Buffer
		code := run(t.Context(), tt.args, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("skein %s: exit %d, %s; want an error saying %q", strings.Join(tt.args, " "), code, stderr.String(), tt.want)
		}
	}
}
