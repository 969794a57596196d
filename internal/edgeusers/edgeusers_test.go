package edgeusers_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"skein.dev/internal/edgeusers"
)

// accountsConf is the cluster's accounts.conf, whose SKEIN users hold the
// edge runners' region.
const accountsConf = "../../ops/cluster/nats/accounts.conf"

func readAccounts(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(accountsConf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newRunner(t *testing.T, name string) (edgeusers.Runner, []byte) {
	t.Helper()
	r, cred, err := edgeusers.NewCredential(name)
	if err != nil {
		t.Fatal(err)
	}
	return r, cred
}

// parseAccounts loads conf as nats-server does, its passwords from the
// environment, and returns the options.
func parseAccounts(t *testing.T, conf []byte) *server.Options {
	t.Helper()
	for _, m := range regexp.MustCompile(`\$(SKEIN_\w+_PASSWORD)`).FindAllStringSubmatch(string(conf), -1) {
		t.Setenv(m[1], "pw")
	}
	path := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses the accounts file: %v\n%s", err, conf)
	}
	return opts
}

// The cluster's accounts.conf has the region, empty. Runners written there
// are read back; the rest of the file stays byte for byte; and nats-server
// loads each as an nkey user of SKEIN that may connect only as a leaf
// node, with its own runner's rights.
func TestWriteRead(t *testing.T) {
	conf := readAccounts(t)
	if rs, err := edgeusers.Read(conf); err != nil || len(rs) != 0 {
		t.Fatalf("Read(accounts.conf) = %v, %v; want no runner", rs, err)
	}
	laptop, _ := newRunner(t, "laptop")
	desk, _ := newRunner(t, "desk")
	out, err := edgeusers.Write(conf, []edgeusers.Runner{laptop, desk})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := edgeusers.Read(out); err != nil || !slices.Equal(got, []edgeusers.Runner{laptop, desk}) {
		t.Errorf("Read(Write(laptop, desk)) = %v, %v", got, err)
	}
	if back, err := edgeusers.Write(out, nil); err != nil || string(back) != string(conf) {
		t.Errorf("Write(none) does not give the file back as it was (%v):\n%s", err, back)
	}
	opts := parseAccounts(t, out)
	var found int
	for _, u := range opts.Nkeys {
		var name string
		switch u.Nkey {
		case laptop.Nkey:
			name = "laptop"
		case desk.Nkey:
			name = "desk"
		default:
			continue
		}
		found++
		if u.Account == nil || u.Account.Name != "SKEIN" {
			t.Errorf("runner %s: account %v, want SKEIN", name, u.Account)
		}
		if _, ok := u.AllowedConnectionTypes["LEAFNODE"]; !ok || len(u.AllowedConnectionTypes) != 1 {
			t.Errorf("runner %s: connection types %v, want LEAFNODE only", name, u.AllowedConnectionTypes)
		}
		pub, sub := u.Permissions.Publish.Allow, u.Permissions.Subscribe.Allow
		if want := []string{"acp.io.*.*." + name, "$JS.skein.API.$KV.ACP_RUNNERS." + name, "_INBOX.session.>"}; !slices.Equal(pub, want) {
			t.Errorf("runner %s may publish %q, want %q", name, pub, want)
		}
		if want := []string{"acp.runner." + name + ".*", "_INBOX.edge." + name + ".>"}; !slices.Equal(sub, want) {
			t.Errorf("runner %s may subscribe %q, want %q", name, sub, want)
		}
	}
	if found != 2 {
		t.Errorf("nats-server loaded %d of the 2 runners' users", found)
	}
	// Every other user of the file connects as a client only: a password
	// is no way in through the leafnodes listener.
	for _, u := range opts.Users {
		if _, ok := u.AllowedConnectionTypes["LEAFNODE"]; ok || len(u.AllowedConnectionTypes) == 0 {
			t.Errorf("user %s may connect as a leaf node (%v)", u.Username, u.AllowedConnectionTypes)
		}
	}
}

// Adding a runner twice with its key changes nothing; with a new key, it
// replaces the old one in its place. Removing one that is not there is an
// error.
func TestAddRemove(t *testing.T) {
	a, _ := newRunner(t, "a")
	b, _ := newRunner(t, "b")
	rs, changed := edgeusers.Add(nil, a)
	if !changed {
		t.Error("adding a new runner changed nothing")
	}
	rs, _ = edgeusers.Add(rs, b)
	if again, changed := edgeusers.Add(rs, a); changed || !slices.Equal(again, rs) {
		t.Errorf("adding runner a with its key again: %v, changed %v; want %v unchanged", again, changed, rs)
	}
	a2, _ := newRunner(t, "a")
	if got, changed := edgeusers.Add(rs, a2); !changed || !slices.Equal(got, []edgeusers.Runner{a2, b}) {
		t.Errorf("a new key for runner a: %v, changed %v; want [a2 b]", got, changed)
	}
	if _, err := edgeusers.Remove(rs, "c"); err == nil || !strings.Contains(err.Error(), "c") {
		t.Errorf("Remove of an unknown runner = %v, want an error naming it", err)
	}
	if got, err := edgeusers.Remove(rs, "a"); err != nil || !slices.Equal(got, []edgeusers.Runner{b}) {
		t.Errorf("Remove(a) = %v, %v; want [b]", got, err)
	}
}

// Update writes the file once the runners change, in place and with its
// mode, and not at all when they do not. Adding a runner again is
// idempotent; revoking one that is not there fails and writes nothing.
func TestUpdate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(path, readAccounts(t), 0o640); err != nil {
		t.Fatal(err)
	}
	laptop, _ := newRunner(t, "laptop")
	add := func(rs []edgeusers.Runner) ([]edgeusers.Runner, bool, error) {
		out, changed := edgeusers.Add(rs, laptop)
		return out, changed, nil
	}
	if _, changed, err := edgeusers.Update(path, add); err != nil || !changed {
		t.Fatalf("Update(add laptop) = %v, changed %v", err, changed)
	}
	written, _ := os.ReadFile(path)
	fi, _ := os.Stat(path)
	if _, changed, err := edgeusers.Update(path, add); err != nil || changed {
		t.Errorf("Update(add laptop) again = %v, changed %v; want unchanged", err, changed)
	}
	if again, _ := os.ReadFile(path); string(again) != string(written) {
		t.Error("adding laptop again changed the file")
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("the file's mode is %v after Update, want 0640 as it was", fi.Mode().Perm())
	}
	remove := func(name string) func([]edgeusers.Runner) ([]edgeusers.Runner, bool, error) {
		return func(rs []edgeusers.Runner) ([]edgeusers.Runner, bool, error) {
			out, err := edgeusers.Remove(rs, name)
			return out, err == nil, err
		}
	}
	if _, _, err := edgeusers.Update(path, remove("desk")); err == nil {
		t.Error("revoking an unknown runner succeeded")
	}
	if again, _ := os.ReadFile(path); string(again) != string(written) {
		t.Error("revoking an unknown runner changed the file")
	}
	if rs, _, err := edgeusers.Update(path, remove("laptop")); err != nil || len(rs) != 0 {
		t.Errorf("revoking laptop: %v, %v; want no runner left", rs, err)
	}
	if back, _ := os.ReadFile(path); string(back) != string(readAccounts(t)) {
		t.Error("the file after adding and revoking laptop is not what it was")
	}
}

// A region that holds what skein provision runner did not write, a
// changed entry, or no region at all is refused, not rewritten.
func TestReadRefuses(t *testing.T) {
	conf := string(readAccounts(t))
	laptop, _ := newRunner(t, "laptop")
	out, err := edgeusers.Write([]byte(conf), []edgeusers.Runner{laptop})
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]string{
		"no region":     strings.Replace(conf, edgeusers.BeginMarker, "# gone", 1),
		"a hand entry":  strings.Replace(conf, edgeusers.EndMarker, "{user: x, password: y}\n"+edgeusers.EndMarker, 1),
		"a wider right": strings.Replace(string(out), `"acp.runner.laptop.*"`, `"acp.runner.>"`, 1),
		"two begins":    strings.Replace(conf, edgeusers.EndMarker, edgeusers.BeginMarker+"\n"+edgeusers.EndMarker, 1),
	} {
		if rs, err := edgeusers.Read([]byte(bad)); err == nil {
			t.Errorf("%s: Read = %v, want an error", name, rs)
		}
	}
}

// A credential is written readable by its owner only, never over a file
// that is there, and reads back as its runner's key.
func TestCredential(t *testing.T) {
	laptop, cred := newRunner(t, "laptop")
	path := filepath.Join(t.TempDir(), "laptop.creds")
	if err := edgeusers.WriteCredential(path, cred); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("credential file mode %v, want 0600", fi.Mode().Perm())
	}
	if err := edgeusers.WriteCredential(path, cred); err == nil {
		t.Error("a credential was written over an existing file")
	}
	b, _ := os.ReadFile(path)
	c, err := edgeusers.ParseCredential(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.Runner != laptop {
		t.Errorf("ParseCredential = %v, want runner %v", c.Runner, laptop)
	}
	if kp, err := nkeys.FromSeed(c.Seed); err != nil {
		t.Errorf("the credential's seed: %v", err)
	} else if pub, _ := kp.PublicKey(); pub != laptop.Nkey {
		t.Errorf("the credential's seed is the key of %s, want %s", pub, laptop.Nkey)
	}
	for _, bad := range []string{"", "not a credential", strings.Replace(string(b), "laptop", "a.b", 1)} {
		if _, err := edgeusers.ParseCredential([]byte(bad)); err == nil {
			t.Errorf("ParseCredential(%.30q) accepted", bad)
		}
	}
	if _, _, err := edgeusers.NewCredential("a b"); err == nil {
		t.Error("NewCredential of an invalid runner ID succeeded")
	}
}
