package main

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events/streams"
)

// clusterAccounts is ops/cluster/nats/accounts.conf, byte for byte
// (TestDevAccountsAreTheClusters): the embedded server of skein dev runs
// the cluster's own accounts, users and permissions, so that what a
// service may do on a dev stack is what it may do in production. A Go
// embed cannot reach outside its module, hence the copy; `go generate`
// refreshes it.
//
//go:generate cp ../../ops/cluster/nats/accounts.conf accounts.conf
//go:embed accounts.conf
var clusterAccounts string

// The users skein dev itself names: the admin, whose files the welcome
// and the README point to, and the reader. The services connect as
// devServiceUser's.
const (
	devAdminUser  = "skein-ops"
	devReaderUser = "reader-default"
)

// devServiceUser is the user of accounts.conf each service connects as,
// the same as make cluster's: skein-<target>.
func devServiceUser(target string) string { return "skein-" + target }

// devInboxPrefix is the inbox prefix of a user whose permissions allow
// only its own inbox: a service's (skein serve sets the same) and the
// reader's (accounts.conf says so beside its grants). The admin may use
// any, and gets the default.
func devInboxPrefix(user string) string {
	switch {
	case user == devReaderUser:
		return "_INBOX." + user
	case strings.HasPrefix(user, "skein-") && user != devAdminUser:
		return "_INBOX." + strings.TrimPrefix(user, "skein-")
	}
	return ""
}

// devUsersDir is where skein dev keeps its NATS users' credentials, under
// the data directory. The directory is 0700 and every file in it 0600.
const devUsersDir = "nats-users"

// devNATSAuth are the users of skein dev's embedded NATS server: every
// user of accounts.conf, each with a random password kept under the data
// directory, so that they survive a restart as the streams do.
type devNATSAuth struct {
	dir       string
	passwords map[string]string // by user
	conf      string            // accounts.conf with the passwords defined before it
}

// passwordVar matches a user of accounts.conf and the variable its
// password is read from: {user: skein-gateway, password: $SKEIN_GATEWAY_PASSWORD, ...}.
// plainPassword is what a password file may hold: what a URL carries as
// it is and a configuration string quotes plainly. rand.Text's base32 is.
var plainPassword = regexp.MustCompile(`^[A-Za-z0-9._~-]+$`)

var passwordVar = regexp.MustCompile(`\{\s*user:\s*([\w-]+),\s*password:\s*\$(\w+)`)

// ensureDevNATSAuth reads the passwords under <dataDir>/nats-users, first
// writing a random one for every user of accounts.conf that has none.
func ensureDevNATSAuth(dataDir string) (*devNATSAuth, error) {
	a := &devNATSAuth{dir: filepath.Join(dataDir, devUsersDir), passwords: map[string]string{}}
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return nil, err
	}
	// A directory made by hand may be readable by
	// others: what it holds is not.
	if err := os.Chmod(a.dir, 0o700); err != nil {
		return nil, err
	}
	var defs strings.Builder
	defs.WriteString("# Written by skein dev: the passwords of accounts.conf's users (under " + devUsersDir + ").\n")
	for _, m := range passwordVar.FindAllStringSubmatch(clusterAccounts, -1) {
		user, variable := m[1], m[2]
		pw, err := a.ensurePassword(user)
		if err != nil {
			return nil, err
		}
		a.passwords[user] = pw
		// The configuration's own variables win over the environment's,
		// so a SKEIN_*_PASSWORD set for a cluster does not leak in here.
		fmt.Fprintf(&defs, "%s: %s\n", variable, strconv.Quote(pw))
	}
	for _, u := range []string{devAdminUser, devReaderUser, devServiceUser(TargetGateway), devServiceUser(TargetSession),
		devServiceUser(TargetAdapterRunner), devServiceUser(TargetHistory), devServiceUser(TargetNotify)} {
		if a.passwords[u] == "" {
			return nil, fmt.Errorf("accounts.conf has no user %s with a password", u)
		}
	}
	a.conf = defs.String() + clusterAccounts
	return a, nil
}

// ensurePassword returns user's password from its file, first writing a
// random one (130 bits from crypto/rand) when there is none.
func (a *devNATSAuth) ensurePassword(user string) (string, error) {
	path := a.file(user, ".password")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		pw := strings.TrimSpace(string(b))
		if !plainPassword.MatchString(pw) {
			return "", fmt.Errorf("%s: not a password of letters, digits, '-', '_', '.' or '~': remove it, and skein dev writes a new one", path)
		}
		return pw, os.Chmod(path, 0o600)
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	pw := rand.Text()
	return pw, writePrivate(path, []byte(pw+"\n"))
}

func (a *devNATSAuth) file(user, ext string) string { return filepath.Join(a.dir, user+ext) }

// apply loads the accounts and users into opts: no client may connect
// without a user's password, in-process ones included.
func (a *devNATSAuth) apply(opts *server.Options) error {
	if err := opts.ProcessConfigString(a.conf); err != nil {
		return fmt.Errorf("embedded nats: accounts.conf: %w", err)
	}
	if len(opts.Users) == 0 || opts.NoAuthUser != "" {
		return errors.New("embedded nats: accounts.conf gives no users, or lets clients in without one")
	}
	return nil
}

// writeClientFiles writes, for every user, the URL with its credentials
// (<user>.url: for NATS_URL and the skein commands' --nats) and a nats CLI
// context (<user>.json: nats --context FILE) for the server at url. With
// no url (no listener) it removes those of an earlier run, which name a
// port that is gone.
func (a *devNATSAuth) writeClientFiles(url string) error {
	for _, user := range slices.Sorted(maps.Keys(a.passwords)) {
		urlFile, ctxFile := a.file(user, ".url"), a.file(user, ".json")
		if url == "" {
			for _, f := range []string{urlFile, ctxFile} {
				if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
			continue
		}
		withUser, err := urlWithUser(url, user, a.passwords[user])
		if err != nil {
			return err
		}
		if err := writePrivate(urlFile, []byte(withUser+"\n")); err != nil {
			return err
		}
		ctx, err := json.MarshalIndent(map[string]string{
			"description":  "skein dev, user " + user,
			"url":          url,
			"user":         user,
			"password":     a.passwords[user],
			"inbox_prefix": devInboxPrefix(user),
		}, "", "  ")
		if err != nil {
			return err
		}
		if err := writePrivate(ctxFile, append(ctx, '\n')); err != nil {
			return err
		}
	}
	return nil
}

// urlWithUser puts user and password into a nats:// URL.
func urlWithUser(url, user, password string) (string, error) {
	rest, ok := strings.CutPrefix(url, "nats://")
	if !ok {
		return "", fmt.Errorf("embedded nats: unexpected client URL %q", url)
	}
	// The passwords are plainPassword's and the users names of
	// accounts.conf: nothing in them needs escaping in a URL.
	return "nats://" + user + ":" + password + "@" + rest, nil
}

// writePrivate writes b to path, readable by its owner only, replacing
// what was there at once: the file is written under another name first,
// created 0600, so it is never readable by others, not even half-written.
func writePrivate(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o600) // CreateTemp makes 0600 already; this says so
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// checkNATSListen refuses a --nats-listen address other machines could
// reach, unless allowAny says so: the dev server holds every namespace's
// sessions, and a password under the data directory is all that guards
// it.
func checkNATSListen(addr string, allowAny bool) error {
	if allowAny {
		return nil
	}
	if err := checkLoopback(addr); err != nil {
		return fmt.Errorf("--nats-listen: %w; --nats-listen-any allows it", err)
	}
	return nil
}

// connect connects to ns in process as user.
func (a *devNATSAuth) connect(ns *server.Server, user, name string) (*nats.Conn, error) {
	opts := []nats.Option{nats.InProcessServer(ns), nats.Name(name), nats.UserInfo(user, a.passwords[user])}
	if p := devInboxPrefix(user); p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	return nats.Connect("", opts...)
}

// provisionDev creates or updates the streams and buckets as the admin,
// with the session service's options: what skein provision does before a
// cluster's services start.
func provisionDev(ctx context.Context, ns *server.Server, a *devNATSAuth, c *stackConfig) error {
	nc, err := a.connect(ns, devAdminUser, "skein dev provision")
	if err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	o := streams.Options{Replicas: c.Replicas, OwnerTTL: c.Session.OwnerTTL,
		MaxEventsPerSession: c.Session.MaxEventsPerSession, MaxBytesPerSession: c.Session.MaxBytesPerSession}
	if err := streams.Provision(ctx, js, o, true); err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	return nil
}
