//go:build linux

package adapterrunner_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"skein.dev/pkg/events"
	adapterrunner "skein.dev/services/adapter-runner"
)

// refusedAttacks are the testagent's try attacks (testagent/privs_linux.go)
// that an adapter must be refused, each with EPERM: a packet socket (with
// which a root agent once read another tenant's bearer token off
// loopback), a raw socket, a character device node (a copy of /dev/kmsg),
// ptrace of its own child, bpf, perf_event_open, a key, dmesg, a mount,
// a namespace of its own (unshare, and a child in a user namespace).
var refusedAttacks = []string{"packet", "raw", "mknod-char", "ptrace", "bpf", "perf", "keyctl", "syslog", "mount", "unshare", "userns"}

// Every attack of refusedAttacks is refused an adapter, with an error it
// can report (not a kill: the turn goes on); a FIFO, which agents make
// legitimately, is not.
func TestSecurityAgentSyscallsRefused(t *testing.T) {
	requireLandlock(t, 1)
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire})
	if _, err := h.createWith(t, "s1", events.AcpCreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	var script []string
	for _, a := range refusedAttacks {
		script = append(script, "try "+a)
	}
	got := h.probe(t, "s1", "t1", append(script, "try mknod-fifo")...)
	refused := 0
	for _, a := range refusedAttacks {
		if r := got["try "+a]; !strings.HasPrefix(r, "error ") || !strings.HasSuffix(r, ": operation not permitted") && r != "error operation not permitted" {
			t.Errorf("try %s = %q, want error operation not permitted", a, r)
		} else {
			refused++
		}
	}
	t.Logf("%d of %d attacks refused", refused, len(refusedAttacks))
	if r := got["try mknod-fifo"]; r != "ok" {
		t.Errorf("try mknod-fifo = %q, want ok", r)
	}
}

// An adapter holds no capability in any set, cannot gain one
// (no_new_privs), runs under a seccomp filter, and, where the runner runs
// as root, as another user, of no supplementary group.
func TestSecurityAgentHoldsNoPrivileges(t *testing.T) {
	requireLandlock(t, 1)
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire})
	if _, err := h.createWith(t, "s1", events.AcpCreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	checkNoPrivileges(t, h.probe(t, "s1", "t1", "whoami")["whoami"])
}

// checkNoPrivileges checks a testagent whoami report.
func checkNoPrivileges(t *testing.T, report string) {
	t.Helper()
	fields := map[string]string{}
	for f := range strings.FieldsSeq(strings.TrimPrefix(report, "ok ")) {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = v
	}
	want := map[string]string{
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
	}
	// Emptying the bounding set takes CAP_SETPCAP, which a runner not
	// run as root lacks; no_new_privs leaves such a set nothing to
	// grant.
	if os.Geteuid() == 0 {
		want["CapBnd"] = "0000000000000000"
	}
	for k, v := range want {
		if fields[k] != v {
			t.Errorf("the adapter's %s = %q, want %q (whoami: %s)", k, fields[k], v, report)
		}
	}
	if os.Geteuid() == 0 {
		if fields["Uid"] == "0" || fields["Gid"] == "0" || fields["Uid"] == "" {
			t.Errorf("the runner runs as root, its adapter as uid %q gid %q: want another user", fields["Uid"], fields["Gid"])
		}
		if fields["Groups"] != "" {
			t.Errorf("the adapter's supplementary groups = %q, want none", fields["Groups"])
		}
	}
}

// giveToAdapters gives each directory, the test's as a user's own project
// would be, to the adapters' user when the test runs as root (and so the
// runner, whose adapters then run as that user): as docs/OPERATIONS.md
// tells the operator of a root runner to. Skein makes only its own
// directories theirs.
func giveToAdapters(t *testing.T, dirs ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	for _, d := range dirs {
		if err := os.Chown(d, adapterrunner.DefaultAdapterUID, adapterrunner.DefaultAdapterUID); err != nil {
			t.Fatal(err)
		}
	}
}

// With adapter-runner.adapter-uid-range, a root runner's adapter runs as
// its namespace's uid, one of the range.
func TestSecurityAgentRunsAsItsNamespacesUser(t *testing.T) {
	requireLandlock(t, 1)
	if os.Geteuid() != 0 {
		t.Skip("the adapters' users are a root runner's")
	}
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire, AdapterUID: 300000, AdapterUIDRange: 1000})
	if _, err := h.createWith(t, "s1", events.AcpCreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	report := h.probe(t, "s1", "t1", "whoami", "write own.txt x")
	checkNoPrivileges(t, report["whoami"])
	var uid int
	for f := range strings.FieldsSeq(report["whoami"]) {
		if v, ok := strings.CutPrefix(f, "Uid="); ok {
			uid, _ = strconv.Atoi(v)
		}
	}
	if uid < 300000 || uid >= 301000 {
		t.Errorf("the adapter runs as uid %d, want one of 300000-300999 (whoami: %s)", uid, report["whoami"])
	}
	if report["write own.txt"] != "ok" {
		t.Errorf("write in its own cwd = %q, want ok", report["write own.txt"])
	}
}

// What is uploaded for a session is its agent's, under a root runner too
// (the adapters' user's): the agent reads it, and may remove it, in its
// .skein-attachments; an upload before the session's first adapter makes
// the cwd the agent's as well.
func TestAgentOwnsItsUploads(t *testing.T) {
	requireLandlock(t, 1)
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire})
	f, err := upload(t, h, "s1", "notes.txt", []byte("uploaded for the agent"), 8)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.createWith(t, "s1", events.AcpCreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	at := events.AttachmentDir + "/" + f.Name
	got := h.probe(t, "s1", "t1", "read "+at, "write "+at+" changed", "write made-by-the-agent.txt x")
	if got["read "+at] != "ok uploaded for the agent" || got["write "+at] != "ok" || got["write made-by-the-agent.txt"] != "ok" {
		t.Errorf("the agent's reads and writes = %q, want its upload readable and writable, its cwd writable", got)
	}
}

// An MPTCP socket would bind and connect past Landlock's TCP rules, which
// see IPPROTO_TCP only: it is refused, and callers fall back to TCP.
func TestSecurityAgentCannotOpenMPTCP(t *testing.T) {
	requireLandlock(t, 1)
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire})
	if _, err := h.createWith(t, "s1", events.AcpCreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	if r := h.probe(t, "s1", "t1", "try mptcp")["try mptcp"]; r != "error operation not permitted" {
		t.Errorf("try mptcp = %q, want error operation not permitted", r)
	}
}
