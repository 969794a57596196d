// Package edgeusers keeps the NATS users of Skein's edge runners (skein
// runner --join): each one's entry among the users of the account SKEIN in
// ops/cluster/nats/accounts.conf, and the credential file it joins with.
//
// An edge runner is a user of the account SKEIN authenticated by an nkey,
// allowed to connect only as a leaf node, with rights scoped to its ID
// (Entry). Static users, not JWTs: nats-server applies a change of an
// account's users at a configuration reload, without a restart; and a
// reload is all a revocation needs besides closing the revoked runner's
// leaf connection, which the server does not re-check by itself (skein
// provision runner does both).
//
// The users of an account are one array in the configuration, and
// nats-server's configuration format has no way to join an array from two
// files (an include stands only where a key may), so the edge runners'
// entries are kept inside that array, between two marker lines of
// accounts.conf (BeginMarker, EndMarker) that no one else writes between.
// Read and Write parse and rewrite that region alone; the rest of the file
// is the operator's, and is left byte for byte.
package edgeusers

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"

	"skein.dev/pkg/events"
)

// The marker lines of accounts.conf, inside the users array of the account
// SKEIN, between which the edge runners' entries are kept.
const (
	BeginMarker = "# -- edge runners: skein provision runner writes the lines below --"
	EndMarker   = "# -- edge runners: end --"
)

// Runner is an edge runner's user: its ID, which its rights name, and the
// public key of its nkey.
type Runner struct {
	Name string
	Nkey string
}

// InboxPrefix is the inbox prefix of runner name's connection, the only
// inbox its rights let it read: replies to its JetStream publishes.
func InboxPrefix(name string) string { return "_INBOX.edge." + name }

// sessionInboxes are the inboxes of the session service (skein serve
// gives each service the inbox prefix _INBOX.<service>), to which a runner
// answers the service's requests. nats-server carries an answer across a
// leaf connection only where the hub told the leaf it has interest, and
// it tells a leaf only of subjects the leaf may publish: allow_responses
// alone, which lets a client answer, does not.
const sessionInboxes = "_INBOX.session.>"

// Entry returns the user of runner r, as accounts.conf holds it: one line,
// its ID in a comment after it. What the runner may send into the cluster
// (publish) and what it may receive (subscribe), read as the leaf's (the
// hub reverses a leaf user's rights internally):
//
//   - publish acp.io.*.*.<id>: its adapters' records, on subjects that
//     name it (events.IOSubject). A session's owner drops every record of
//     a runner its adapter does not run on: the edge writes only for the
//     sessions placed on it.
//   - publish its own heartbeat, through the JetStream domain
//     ($JS.skein.API.$KV.ACP_RUNNERS.<id>), and nothing else of JetStream:
//     no stream info, no direct get, no consumer, no other key.
//   - publish the session service's inboxes: answers to its requests.
//   - subscribe its own control subjects, acp.runner.<id>.*, and its own
//     inbox, _INBOX.edge.<id>.>: acknowledgements of what it published.
//
// Nothing else: no session's log, tail or live subject, no other runner's
// subjects, no $SRV discovery (a runner answering a ping of every runner
// could name itself another runner in its metadata).
func Entry(r Runner) string {
	id := events.RunnerID(r.Name)
	pub := []string{events.IOSubject("*", "*", id), events.KVSubjectInDomain(events.JetStreamDomain, events.BucketRunners, r.Name), sessionInboxes}
	sub := []string{events.RunnerSubject(id, "*"), InboxPrefix(r.Name) + ".>"}
	return fmt.Sprintf(`{nkey: %s, allowed_connection_types: ["LEAFNODE"], permissions: {publish: {allow: [%s]}, subscribe: {allow: [%s]}}}  # runner %s`,
		r.Nkey, quoteAll(pub), quoteAll(sub), r.Name)
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = `"` + s + `"`
	}
	return strings.Join(q, ", ")
}

// entryLine matches a line Entry wrote, indented, and gives the nkey and
// the runner's name.
var entryLine = regexp.MustCompile(`^\s*\{nkey: (U[A-Z0-9]+), allowed_connection_types: .*\}  # runner ([A-Za-z0-9_-]+)\s*$`)

// Read returns the edge runners of an accounts.conf, in the order the file
// lists them. A file without the two markers, or whose region holds a
// line Entry did not write (or one it wrote, changed), is an error: a
// rewrite would lose it.
func Read(conf []byte) ([]Runner, error) {
	_, region, _, err := split(conf)
	if err != nil {
		return nil, err
	}
	var out []Runner
	for _, line := range region {
		if strings.TrimSpace(line) == "" {
			continue
		}
		m := entryLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("a line between the edge runners' markers that skein provision runner did not write: %s", strings.TrimSpace(line))
		}
		r := Runner{Name: m[2], Nkey: m[1]}
		if err := r.check(); err != nil {
			return nil, err
		}
		if strings.TrimSpace(line) != Entry(r) {
			return nil, fmt.Errorf("runner %s's line between the edge runners' markers was changed by hand: %s", r.Name, strings.TrimSpace(line))
		}
		if slices.ContainsFunc(out, func(o Runner) bool { return o.Name == r.Name }) {
			return nil, fmt.Errorf("runner %s is listed twice between the edge runners' markers", r.Name)
		}
		out = append(out, r)
	}
	return out, nil
}

// Write returns conf with its edge runners' region holding runners, one
// Entry a line, indented as the begin marker is. Everything outside the
// region stays as it was.
func Write(conf []byte, runners []Runner) ([]byte, error) {
	before, _, after, err := split(conf)
	if err != nil {
		return nil, err
	}
	indent := before[len(before)-1][:len(before[len(before)-1])-len(strings.TrimLeft(before[len(before)-1], " \t"))]
	var b bytes.Buffer
	for _, l := range before {
		b.WriteString(l + "\n")
	}
	for _, r := range runners {
		if err := r.check(); err != nil {
			return nil, err
		}
		b.WriteString(indent + Entry(r) + "\n")
	}
	for i, l := range after {
		b.WriteString(l)
		if i < len(after)-1 {
			b.WriteString("\n")
		}
	}
	return b.Bytes(), nil
}

// split cuts conf into its lines up to and with the begin marker, those
// between the markers, and those from the end marker on.
func split(conf []byte) (before, region, after []string, err error) {
	lines := strings.Split(string(conf), "\n")
	begin, end := -1, -1
	for i, l := range lines {
		switch strings.TrimSpace(l) {
		case BeginMarker:
			if begin >= 0 {
				return nil, nil, nil, errors.New("the edge runners' begin marker is there twice")
			}
			begin = i
		case EndMarker:
			if end >= 0 {
				return nil, nil, nil, errors.New("the edge runners' end marker is there twice")
			}
			end = i
		}
	}
	if begin < 0 || end < begin {
		return nil, nil, nil, fmt.Errorf("no region for edge runners: the users of account SKEIN need the lines %q and %q, in that order (ops/cluster/nats/accounts.conf has them)", BeginMarker, EndMarker)
	}
	return lines[:begin+1], lines[begin+1 : end], lines[end:], nil
}

func (r Runner) check() error {
	if !events.RunnerID(r.Name).Valid() {
		return fmt.Errorf("runner ID %q must match [A-Za-z0-9_-]{1,128}", r.Name)
	}
	if !nkeys.IsValidPublicUserKey(r.Nkey) {
		return fmt.Errorf("runner %s: %q is not the public key of a user nkey", r.Name, r.Nkey)
	}
	return nil
}

// Add returns runners with r in it: r added at the end, or in the place of
// the runner of its name, with its new key. changed is false when that
// runner had r's key already.
func Add(runners []Runner, r Runner) (out []Runner, changed bool) {
	i := slices.IndexFunc(runners, func(o Runner) bool { return o.Name == r.Name })
	if i < 0 {
		return append(slices.Clone(runners), r), true
	}
	if runners[i].Nkey == r.Nkey {
		return runners, false
	}
	out = slices.Clone(runners)
	out[i] = r
	return out, true
}

// Remove returns runners without the runner named name, and an error when
// there is no such runner.
func Remove(runners []Runner, name string) ([]Runner, error) {
	i := slices.IndexFunc(runners, func(o Runner) bool { return o.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("no edge runner %s is provisioned", name)
	}
	return slices.Delete(slices.Clone(runners), i, i+1), nil
}

// credHeader starts a credential file, naming its runner: "# Skein edge
// runner <id>".
const credHeader = "# Skein edge runner "

// NewCredential makes a key pair for runner name and returns its user
// and the credential file that holds its seed.
func NewCredential(name string) (Runner, []byte, error) {
	if !events.RunnerID(name).Valid() {
		return Runner{}, nil, fmt.Errorf("runner ID %q must match [A-Za-z0-9_-]{1,128}", name)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return Runner{}, nil, err
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return Runner{}, nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return Runner{}, nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s%s\n", credHeader, name)
	fmt.Fprintf(&b, "# Its private key: whoever holds this file can run as runner %s. Keep it\n", name)
	b.WriteString("# on that runner's machine only, readable by its user only.\n")
	b.WriteString("#   skein runner --join URL --creds THIS_FILE\n\n")
	b.WriteString("-----BEGIN USER NKEY SEED-----\n")
	b.Write(seed)
	b.WriteString("\n------END USER NKEY SEED------\n")
	return Runner{Name: name, Nkey: pub}, b.Bytes(), nil
}

// Credential is a credential file read back: its runner, and the seed of
// its key.
type Credential struct {
	Runner
	Seed []byte
}

// ParseCredential reads a credential file NewCredential wrote.
func ParseCredential(b []byte) (Credential, error) {
	first, _, _ := bytes.Cut(b, []byte("\n"))
	name, ok := strings.CutPrefix(strings.TrimSpace(string(first)), credHeader)
	if !ok || !events.RunnerID(name).Valid() {
		return Credential{}, errors.New("not a Skein edge runner's credential (skein provision runner NAME --out FILE writes one)")
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return Credential{}, fmt.Errorf("runner %s's credential: %w", name, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return Credential{}, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return Credential{}, err
	}
	// Wipe, deferred, zeroes the key pair's seed, which Seed shares.
	return Credential{Runner: Runner{Name: name, Nkey: pub}, Seed: slices.Clone(seed)}, nil
}

// WriteCredential writes a credential file at path, readable by its owner
// only, and never over a file that is there: a file at path is another
// credential, or something else, that the caller must remove first.
func WriteCredential(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists: remove it first, or write the credential elsewhere", path)
	}
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The umask may have taken bits O_CREATE's mode never had; it
		// cannot add any, but say what the file is.
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

// Update rewrites the accounts file at path with f applied to its edge
// runners, as Write gives it, in place of the old one at once (a file
// beside it, renamed over it, with its mode). It returns the runners it
// wrote. When f leaves them as they were, the file is not written.
func Update(path string, f func([]Runner) ([]Runner, bool, error)) ([]Runner, bool, error) {
	conf, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	runners, err := Read(conf)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	runners, changed, err := f(runners)
	if err != nil || !changed {
		return runners, false, err
	}
	out, err := Write(conf, runners)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, false, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, false, err
	}
	_, err = tmp.Write(out)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), fi.Mode().Perm())
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return nil, false, err
	}
	return runners, true, nil
}
