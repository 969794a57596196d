package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/internal/cluster"
	"skein.dev/internal/testutil"
)

// devNATS is skein dev run in process, as the tour runs it, with its NATS
// server listening on a free loopback port.
type devNATS struct {
	data string
	url  string // the listener's URL, without a user
}

// startDevNATS runs skein dev with --nats-listen until the test ends.
func startDevNATS(t *testing.T) *devNATS {
	t.Helper()
	if testing.Short() {
		t.Skip("runs skein dev; skipped in -short")
	}
	return startDevNATSOn(t, testutil.TempDir(t))
}

// startDevNATSOn runs skein dev with --nats-listen on the data directory
// data until the test ends.
func startDevNATSOn(t *testing.T, data string) *devNATS {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	out := &testutil.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--data", data, "--http", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--log-level", "warn"},
			func(string) string { return "" }, nil, out, out)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("skein dev exited %d:\n%s", code, out)
		}
	})
	var url string
	if err := pollFor(t.Context(), "skein dev's welcome", func() bool {
		url = welcomeURL(out.String(), "NATS")
		return url != ""
	}); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return &devNATS{data: data, url: url}
}

// devUserURL is the URL with user's password that skein dev wrote under
// data.
func devUserURL(t *testing.T, data, user string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, devUsersDir, user+".url"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// connectAs connects to d's listener as user, with the inbox prefix its
// rights allow.
func (d *devNATS) connectAs(t *testing.T, user string) *nats.Conn {
	t.Helper()
	opts := []nats.Option{nats.Name("attacker as " + user)}
	if p := devInboxPrefix(user); p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	nc, err := nats.Connect(devUserURL(t, d.data, user), opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestSecurityDevNATSAnonymous: a client without a user cannot connect
// to skein dev's NATS listener, nor with a user and a wrong password.
// Before the fix it connected and could do anything.
func TestSecurityDevNATSAnonymous(t *testing.T) {
	d := startDevNATS(t)
	if nc, err := nats.Connect(d.url); err == nil {
		nc.Close()
		t.Fatalf("an anonymous client connected to %s", d.url)
	} else if !strings.Contains(err.Error(), "Authorization Violation") {
		t.Errorf("anonymous connect: %v, want an authorization violation", err)
	}
	if nc, err := nats.Connect(d.url, nats.UserInfo(devAdminUser, "wrong")); err == nil {
		nc.Close()
		t.Fatalf("%s connected with a wrong password", devAdminUser)
	}
}

// attempt is one thing a user tries on the bus: publish to or subscribe to
// a subject.
type attempt struct {
	sub     bool // subscribe, else publish
	subject string
	why     string
}

// try makes the attempt on a connection of its own and returns the
// permissions violation the server answered, or "" when there was none.
// The server answers a refused PUB or SUB with -ERR before the PONG of the
// flush that follows it, so the violation, if any, has arrived when Flush
// returns.
func (a attempt) try(t *testing.T, d *devNATS, user string) string {
	t.Helper()
	nc := d.connectAs(t, user)
	var err error
	if a.sub {
		_, err = nc.SubscribeSync(a.subject)
	} else {
		err = nc.Publish(a.subject, []byte("forged"))
	}
	if err != nil {
		t.Fatalf("%s: %v", a.subject, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("%s: flush: %v", a.subject, err)
	}
	if err := nc.LastError(); err != nil {
		if !strings.Contains(err.Error(), "Permissions Violation") {
			t.Fatalf("%s: %v", a.subject, err)
		}
		return err.Error()
	}
	return ""
}

func pub(subject, why string) attempt { return attempt{subject: subject, why: why} }
func sub(subject, why string) attempt { return attempt{sub: true, subject: subject, why: why} }

// TestSecurityDevNATSLeastPrivilege: each service's user and the reader
// can do what accounts.conf grants them and nothing of what an anonymous
// client did before the fix: list the streams, read another namespace's
// log or the open_session requests (with their env values), publish into
// a session's log, answer get_session. The admin can do all of it. Each
// user also does one thing it is allowed, so that a refusal is the
// permission's and not a connection that works for nothing.
func TestSecurityDevNATSLeastPrivilege(t *testing.T) {
	d := startDevNATS(t)
	var (
		listStreams = pub("$JS.API.STREAM.NAMES", "list every stream")
		forgeLog    = pub("acp.log.default.victim.ctl", "publish a forged event into a session's log")
		answerGet   = sub("acp.api.*.get_session", "answer get_session requests")
		readOpens   = sub("acp.api.*.open_session", "read open_session requests and their env")
		readTeamB   = sub("acp.tail.team-b.>", "follow another namespace's log")
		getTeamB    = pub("$JS.API.DIRECT.GET.ACP_LOG.acp.log.team-b.victim.ctl", "read another namespace's log by direct get")
		getAny      = pub("$JS.API.DIRECT.GET.ACP_LOG", "read any record by sequence")
	)
	cases := []struct {
		user    string
		allowed attempt
		refused []attempt
	}{
		{devServiceUser(TargetGateway), sub("acp.tail.>", "the gateway's SSE"),
			[]attempt{listStreams, forgeLog, answerGet, readOpens}},
		{devServiceUser(TargetHistory), sub("acp.api.*.get_session", "history serves get_session"),
			[]attempt{listStreams, forgeLog, readOpens}},
		{devServiceUser(TargetAdapterRunner), sub("acp.runner.>", "the runner takes adapter control"),
			[]attempt{listStreams, forgeLog, answerGet, readOpens}},
		{devServiceUser(TargetSession), sub("acp.iotail.>", "the session service follows runner output"),
			[]attempt{listStreams, answerGet}},
		{devReaderUser, sub("acp.tail.default.>", "the reader follows namespace default"),
			[]attempt{listStreams, forgeLog, answerGet, readOpens, readTeamB, getTeamB, getAny}},
	}
	for _, c := range cases {
		t.Run(c.user, func(t *testing.T) {
			if v := c.allowed.try(t, d, c.user); v != "" {
				t.Errorf("%s may %s (%s), but: %s", c.user, c.allowed.why, c.allowed.subject, v)
			}
			for _, a := range c.refused {
				if v := a.try(t, d, c.user); v == "" {
					t.Errorf("%s could %s (%s)", c.user, a.why, a.subject)
				}
			}
		})
	}
	t.Run(devAdminUser, func(t *testing.T) {
		for _, a := range []attempt{answerGet, readOpens, readTeamB} {
			if v := a.try(t, d, devAdminUser); v != "" {
				t.Errorf("the admin cannot %s: %s", a.why, v)
			}
		}
		js, err := jetstream.New(d.connectAs(t, devAdminUser))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for n := range js.StreamNames(t.Context()).Name() {
			names = append(names, n)
		}
		if !strings.Contains(strings.Join(names, " "), "ACP_LOG") {
			t.Errorf("the admin lists streams %v, want ACP_LOG among them", names)
		}
	})
}

// TestSecurityDevNATSCredentialFiles: what skein dev writes of its users
// is readable by its owner only, and their directory too.
func TestSecurityDevNATSCredentialFiles(t *testing.T) {
	d := startDevNATS(t)
	dir := filepath.Join(d.data, devUsersDir)
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %v, want 0700", dir, st.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", e.Name(), info.Mode().Perm())
		}
		seen[e.Name()] = true
	}
	for _, user := range []string{devAdminUser, devReaderUser, cluster.UserGateway, cluster.UserSession, cluster.UserRunner, cluster.UserHistory, cluster.UserNotify} {
		for _, ext := range []string{".password", ".url", ".json"} {
			if !seen[user+ext] {
				t.Errorf("no %s%s in %s: %v", user, ext, dir, entries)
			}
		}
	}
}

// TestSecurityDevNATSListenLoopback: skein dev refuses a --nats-listen
// address that other machines can reach unless --nats-listen-any allows
// it. Before the fix 0.0.0.0 was served, although the help said loopback.
func TestSecurityDevNATSListenLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("runs skein dev; skipped in -short")
	}
	out := &testutil.Buffer{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--data", testutil.TempDir(t), "--http", "127.0.0.1:0", "--nats-listen", "0.0.0.0:0", "--log-level", "warn"},
			func(string) string { return "" }, nil, out, out)
	}()
	var code int
	if err := pollFor(t.Context(), "skein dev to exit or serve", func() bool {
		select {
		case code = <-done:
			return true
		default:
			return welcomeURL(out.String(), "NATS") != ""
		}
	}); err != nil {
		t.Fatal(err)
	}
	if welcomeURL(out.String(), "NATS") != "" {
		cancel()
		<-done
		t.Fatalf("skein dev served NATS on 0.0.0.0 without --nats-listen-any:\n%s", out)
	}
	if code == 0 || !strings.Contains(out.String(), "--nats-listen-any") {
		t.Errorf("skein dev --nats-listen 0.0.0.0:0 exited %d, want a refusal naming --nats-listen-any:\n%s", code, out)
	}

	for _, addr := range []string{"0.0.0.0:4222", "[::]:4222", ":4222", "192.168.1.10:4222", "example.com:4222", "localhost.example.com:4222"} {
		if err := checkNATSListen(addr, false); err == nil {
			t.Errorf("--nats-listen %s accepted without --nats-listen-any", addr)
		}
		if err := checkNATSListen(addr, true); err != nil {
			t.Errorf("--nats-listen %s --nats-listen-any: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:4222", "[::1]:4222", "localhost:4222", "127.0.0.2:0"} {
		if err := checkNATSListen(addr, false); err != nil {
			t.Errorf("--nats-listen %s: %v", addr, err)
		}
	}
}

// TestDevAccountsAreTheClusters: skein dev's users and permissions are
// ops/cluster/nats/accounts.conf's, byte for byte: the copy embedded in
// the binary has not drifted (go generate refreshes it).
func TestDevAccountsAreTheClusters(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(opsClusterDir, "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != clusterAccounts {
		t.Fatalf("cmd/skein/accounts.conf differs from %s/accounts.conf: run go generate in cmd/skein", opsClusterDir)
	}
	// And the users skein dev connects its services as are the cluster's.
	for target, user := range opsServiceUsers {
		if devServiceUser(target) != user {
			t.Errorf("skein dev connects %s as %s, the cluster as %s", target, devServiceUser(target), user)
		}
	}
	if devAdminUser != cluster.UserOps || devReaderUser != cluster.UserReader {
		t.Errorf("skein dev's admin and reader are %s and %s, the cluster's %s and %s", devAdminUser, devReaderUser, cluster.UserOps, cluster.UserReader)
	}
}

// TestEnsureDevNATSAuth: the passwords are written once and read back at
// the next start, so that a client's saved URL keeps working; a password
// file that is not a plain password is refused rather than quoted into the
// server's configuration or a URL.
func TestEnsureDevNATSAuth(t *testing.T) {
	data := testutil.TempDir(t)
	first, err := ensureDevNATSAuth(data)
	if err != nil {
		t.Fatal(err)
	}
	second, err := ensureDevNATSAuth(data)
	if err != nil {
		t.Fatal(err)
	}
	for user, pw := range first.passwords {
		if pw == "" || second.passwords[user] != pw {
			t.Errorf("%s: password %q, then %q", user, pw, second.passwords[user])
		}
		if first.passwords[user] == first.passwords[devAdminUser] && user != devAdminUser {
			t.Errorf("%s has the admin's password", user)
		}
	}
	if err := os.WriteFile(first.file(devReaderUser, ".password"), []byte("pw@evil.example:1/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ensureDevNATSAuth(data); err == nil {
		t.Error("a password with '@', ':' and '/' accepted")
	}
}
