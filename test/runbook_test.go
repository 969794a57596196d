package test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"skein.dev/internal/cluster"
)

// runbookPath is the runbook TestRunbook runs, and alertsPath the alert
// rules whose runbook links must land in it.
const (
	runbookPath = "../docs/OPERATIONS.md"
	alertsPath  = "../ops/monitoring/alerts.yml"
)

// runbookRequired are the commands issue 12 asks the runbook to hold,
// verbatim, in blocks the test runs.
var runbookRequired = []string{
	"nats stream info ACP_LOG",
	"nats sub 'acp.tail.default.>' --translate 'skein decode'",
	"nats micro ls",
	"nats micro stats skein-session",
	"nats kv ls ACP_SESSIONS",
}

// runbookNoTest are the commands of `sh no-test` blocks, by their start,
// each with the reason the test does not run it. A no-test command not
// named here fails the test, as does an entry no command uses: the set
// stays small and every member justified.
var runbookNoTest = map[string]string{
	"NATS_SERVER_NAME=n4 ": "starts a fourth nats-server on make cluster's fixed ports; the test's cluster is three nodes on free ports, and a fourth joining is nats-server's business, not the runbook's",
	`nats --server "$NATS_SYS_URL" server cluster peer-remove `: "removes a node from the cluster for good: it must be down first, and the test's cluster would be left with two nodes and R3 streams that cannot place their third replica",
	"nats stream cluster peer-remove ":                          "moves a stream's replica to a node that has none, and every node of a three-node cluster has one of each R3 stream: there is nowhere to move it",
	`nats --server "$NATS_SYS_URL" server cluster evacuate `:    "moves every stream off a node, which needs a fourth node to take them (see peer-remove)",
	"nats stream edit ACP_LOG --replicas 5":                     "five replicas need five nodes",
	"nats stream view ":                                         "interactive: it pages on a terminal, asking before each page, and refuses to run without one; the sub --headers-only line beside it shows the same records",
	"bin/nats-server --signal ldm=":                             "stops a node (lame-duck mode) of make cluster by its pid in .cluster/cluster.json; the fault tests stop and restart nodes",
}

// runbookCheck says what one runbook command must do. A command matches the
// first check whose pattern matches it; a command no check matches fails
// the test, so a new command comes with what it must print.
type runbookCheck struct {
	pattern string
	// want are regular expressions the output (stdout and stderr) must
	// all match.
	want []string
	// stream: the command runs until interrupted. It is stopped once a
	// line matches want[0]; while none has come and the command has
	// subscribed, a turn is run so that there is something to see.
	stream bool
	// poll: the runbook says to wait until the command succeeds (a health
	// check after a change): it is run again until it exits 0, for at
	// most a minute.
	poll bool
	// after is run once the command succeeded.
	after func(t *testing.T, rb *runbookRun, out string)
	// again, when set, is what the runbook says to do when the command
	// fails in a way it names: again returns whether out is that failure
	// and, if so, waits for what the runbook says to wait for before the
	// command is run again (at most twice more).
	again func(rb *runbookRun, t *testing.T, out string) bool
}

var runbookChecks = []runbookCheck{
	{pattern: `^curl -fsS "\$NATS_MONITOR/healthz"$`, want: []string{`"status":\s*"ok"`}, poll: true},
	{pattern: `server list$`, want: []string{`\bn1\b`, `\bn2\b`, `\bn3\b`}},
	{pattern: `server report jetstream$`, want: []string{`\bn1\b`, `\bn2\b`, `\bn3\b`}},
	{pattern: `^nats stream info ACP_LOG$`, want: []string{`Cluster Information`, `Leader: n\d`, `acp\.log\.>`}},
	{pattern: `^nats account info$`, want: []string{`Storage`}},
	{pattern: `^nats stream report$`, want: []string{`ACP_LOG`, `ACP_IO`, `KV_ACP_SESSIONS`, `KV_ACP_OWNERS`}},
	{pattern: `^nats server check stream --stream [A-Z_]+ `, want: []string{`OK`}, poll: true},
	{pattern: `server check meta `, want: []string{`OK`}, poll: true},
	{pattern: `^nats micro ls$`, want: []string{`skein-session`, `skein-history`, `skein-adapter-runner`}},
	{pattern: `^nats micro ls skein-session$`, want: []string{`skein-session`},
		after: func(t *testing.T, rb *runbookRun, out string) {
			if rb.owner != "" && !strings.Contains(out, rb.owner) {
				t.Errorf("nats micro ls skein-session does not list the owner %q that ACP_OWNERS names:\n%s", rb.owner, out)
			}
		}},
	{pattern: `^nats micro ping skein-session$`, want: []string{`skein-session`}},
	{pattern: `^nats micro info skein-session `, want: []string{`skein-session`, `prompt`}},
	{pattern: `^nats micro stats skein-session$`, want: []string{`prompt`}},
	{pattern: `^nats kv ls ACP_RUNNERS$`, want: []string{`adapter-runner-1`}},
	{pattern: `^nats kv ls ACP_SESSIONS$`, want: []string{`default\.{{SID}}`}},
	{pattern: `^nats kv get ACP_SESSIONS .* --raw \| skein decode$`, want: []string{`^\{"record":"SessionMeta",.*"sessionId":"{{SID}}"`}},
	{pattern: `^nats kv get ACP_OWNERS "default\.\$SID" --raw$`, want: []string{`\S`},
		after: func(t *testing.T, rb *runbookRun, out string) { rb.owner = strings.TrimSpace(out) }},
	{pattern: `^skein agents$`, want: []string{`(?m)^test\s+installed\s`}},
	{pattern: `^skein list$`, want: []string{`(?m)^{{SID}}\s+idle\s`}},
	{pattern: `^skein history -s "\$SID"$`, want: []string{`agent_message_chunk`}},
	{pattern: `^skein history -s "\$SID" --json$`, want: []string{`(?m)^\{.*"sequence":\d+`, `"type":"user_message_chunk"`}},
	{pattern: `^skein log "acp\.log\.default\.\$SID\.>" --headers$`,
		want: []string{`Acp-Record: SessionOpened`, `Acp-Turn-Id: `, `Acp-Event-No: 1\b`, `Acp-Record: TurnFinished`}},
	{pattern: `^nats stream get ACP_LOG --last-for .*\.ctl" --translate 'skein decode'$`, want: []string{`"record":"TurnFinished"`}},
	{pattern: `^nats stream get ACP_LOG --last-for .*\.title" --translate 'skein decode'$`, want: []string{`"record":"TitleChanged".*"source":"message"`}},
	{pattern: `^skein log "acp\.log\.default\.\$SID\.>"$`,
		want: []string{`"record":"SessionOpened"`, `"record":"AdapterAttached"`, `"record":"TurnFinished"`}},
	{pattern: `^skein log 'acp\.log\.default\.>' --since 1h$`,
		want: []string{`"record":"SessionOpened"`}},
	{pattern: `^skein log 'acp\.io\.default\.>' --since 1h$`,
		want: []string{`"record":"Adapter(Update|Updates|PromptResult)"`}},
	{pattern: `^skein log "acp\.io\.default\.\$SID\.>" --headers$`, want: []string{`Acp-Process-Id`, `Acp-Record-No: 1\b`}},
	{pattern: `^nats sub 'acp\.tail\.default\.>' --translate 'skein decode'$`, want: []string{`^\{"record":"[A-Za-z]+"`}, stream: true},
	{pattern: `^nats --server "\$NATS_READER_URL" --inbox-prefix _INBOX\.reader-default sub 'acp\.tail\.default\.>' --translate 'skein decode'$`,
		want: []string{`^\{"record":"[A-Za-z]+"`}, stream: true},
	{pattern: `^nats sub 'acp\.live\.default\.>' --translate 'skein decode'$`, want: []string{`^\{"record":"AcpEphemeralSessionUpdateEvent",.*"sessionId":"{{SID}}"`}, stream: true},
	{pattern: `^skein follow --json$`, want: []string{`^\{.*"sessionId":"{{SID}}".*"sequence":\d+`}, stream: true},
	{pattern: `^skein follow --json --session "\$SID" --after 0$`, want: []string{`^\{.*"sessionId":"{{SID}}".*"eventNo":1\b`}, stream: true},
	{pattern: `^nats backup stream KV_ACP_SESSIONS "\$BACKUP/KV_ACP_SESSIONS" --no-progress$`, want: []string{`.`},
		after: func(t *testing.T, rb *runbookRun, out string) { rb.backedUp(t, "KV_ACP_SESSIONS") }},
	{pattern: `^nats backup stream ACP_LOG "\$BACKUP/ACP_LOG" --no-progress$`, want: []string{`.`},
		after: func(t *testing.T, rb *runbookRun, out string) {
			rb.backedUp(t, "ACP_LOG")
			// What the restore must bring back: the history as backed up.
			rb.historyAtBackup = rb.history(t)
		}},
	{pattern: `^nats backup info "\$BACKUP/ACP_LOG"$`, want: []string{`ACP_LOG`}},
	{pattern: `^nats stream rm [A-Z_]+ -f$`, want: nil},
	{pattern: `^nats backup restore stream "\$BACKUP/(ACP_LOG|KV_ACP_SESSIONS)" --no-progress$`, want: []string{`(?i)restored`},
		again: (*runbookRun).restoreRaced},
	{pattern: `^skein provision --replicas 3 --dry-run$`, want: []string{`ACP_LOG\s+unchanged`, `KV_ACP_OWNERS\s+unchanged`}},
	// After the restore it waits until every stream serves its consumers;
	// the restore block's checks (offline) then list the session with a
	// consumer on each replica.
	{pattern: `^skein provision --replicas 3$`, want: []string{`ACP_LOG\s+unchanged`, `KV_ACP_SESSIONS\s+unchanged`, `(?m)^ACP_LOG\s+serving`, `(?m)^KV_ACP_SESSIONS\s+serving`},
		after: func(t *testing.T, rb *runbookRun, out string) {
			if strings.Contains(out, "refused") {
				t.Errorf("skein provision after the restore refused a difference:\n%s", out)
			}
		}},
	{pattern: `^skein prompt -s upgrade-check --agent demo "say upgrade ok"$`, want: []string{`upgrade ok`}},
	{pattern: `^skein provision runner laptop --out laptop\.creds$`, want: []string{`runner laptop: issued`, `(?m)^n1: reloaded`, `(?m)^n2: reloaded`, `(?m)^n3: reloaded`}},
	{pattern: `^skein runner --join "\$SKEIN_LEAF_URL" --creds laptop\.creds --id laptop --label where=laptop$`, want: []string{`^Runner laptop joined the cluster`}, stream: true},
	{pattern: `^curl -fsS "\$NATS_MONITOR/leafz\?subs=1"$`, want: []string{`"leafnodes":\s*\d+`}},
	{pattern: `^skein provision runner laptop --revoke$`, want: []string{`runner laptop: revoked`, `(?m)^n1: reloaded; \d+ leaf connection`, `heartbeat is removed`}},
	{pattern: `^nats stream cluster step-down ACP_LOG$`, want: []string{`(?i)leader`}},
	{pattern: `server cluster step-down$`, want: []string{`(?i)leader`}},
}

// runbookBlock is one fenced block of the runbook that holds commands.
type runbookBlock struct {
	line     int // of the opening fence
	noTest   bool
	setup    bool // the shell's set-up: see runbookRun.setup
	offline  bool // services-stopped: run with every Skein service stopped
	commands []runbookCommand
}

type runbookCommand struct {
	line int
	text string
}

// parseRunbook returns the runbook's blocks of commands: fenced blocks whose
// info string starts with sh (or bash, shell), one command a line, blank
// lines and # comments skipped. Other blocks (text, json) are prose.
func parseRunbook(doc string) ([]runbookBlock, error) {
	var (
		blocks  []runbookBlock
		cur     *runbookBlock
		inFence bool
	)
	for i, l := range strings.Split(doc, "\n") {
		n := i + 1
		// Fences may be indented (a block inside a list item).
		if rest, ok := strings.CutPrefix(strings.TrimLeft(l, " "), "```"); ok {
			if inFence {
				if cur != nil {
					blocks = append(blocks, *cur)
				}
				inFence, cur = false, nil
				continue
			}
			inFence = true
			words := strings.Fields(rest)
			if len(words) == 0 || !slices.Contains([]string{"sh", "bash", "shell"}, words[0]) {
				continue
			}
			cur = &runbookBlock{line: n}
			for _, w := range words[1:] {
				switch w {
				case "no-test":
					cur.noTest = true
				case "setup":
					cur.setup = true
				case "services-stopped":
					cur.offline = true
				default:
					return nil, fmt.Errorf("line %d: unknown block attribute %q (no-test, setup, services-stopped)", n, w)
				}
			}
			continue
		}
		if cur == nil {
			continue
		}
		cmd := strings.TrimSpace(l)
		if cmd == "" || strings.HasPrefix(cmd, "#") {
			continue
		}
		if strings.HasSuffix(cmd, `\`) {
			return nil, fmt.Errorf("line %d: one command a line, no continuations: %s", n, cmd)
		}
		cur.commands = append(cur.commands, runbookCommand{n, cmd})
	}
	if inFence {
		return nil, errors.New("a fenced block is not closed")
	}
	return blocks, nil
}

// checkRunbookText checks what needs no cluster: the required commands are
// there to be run, every no-test command is justified, every command has
// its check, and every alert's runbook link has its section.
func checkRunbookText(t *testing.T, blocks []runbookBlock, doc string) {
	t.Helper()
	var runnable []string
	usedNoTest := map[string]bool{}
	for _, b := range blocks {
		for _, c := range b.commands {
			if b.setup {
				continue
			}
			if b.noTest {
				reason := ""
				for prefix, r := range runbookNoTest {
					if strings.HasPrefix(c.text, prefix) {
						reason = r
						usedNoTest[prefix] = true
					}
				}
				if reason == "" {
					t.Errorf("%s:%d: no-test command without a reason in runbookNoTest: %s", runbookPath, c.line, c.text)
				}
				continue
			}
			runnable = append(runnable, c.text)
			if checkFor(c.text) == nil {
				t.Errorf("%s:%d: no runbookCheck says what this command must print: %s", runbookPath, c.line, c.text)
			}
		}
	}
	for prefix := range runbookNoTest {
		if !usedNoTest[prefix] {
			t.Errorf("runbookNoTest excuses %q, which no no-test block of the runbook holds: drop it", prefix)
		}
	}
	for _, want := range runbookRequired {
		if !slices.Contains(runnable, want) {
			t.Errorf("the runbook does not run %q (issue 12 requires it, verbatim, in a sh block)", want)
		}
	}
	alerts, err := os.ReadFile(alertsPath)
	if errors.Is(err, os.ErrNotExist) {
		t.Logf("%s does not exist: no alert links to check", alertsPath)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	links := regexp.MustCompile(`runbook:\s*"?docs/OPERATIONS\.md#([A-Za-z0-9_-]+)`).FindAllStringSubmatch(string(alerts), -1)
	if len(links) == 0 {
		t.Errorf("%s names no runbook link", alertsPath)
	}
	for _, m := range links {
		if !strings.Contains(doc, `<a id="`+m[1]+`"></a>`) {
			t.Errorf("%s links docs/OPERATIONS.md#%s, which has no such anchor", alertsPath, m[1])
		}
	}
}

func checkFor(cmd string) *runbookCheck {
	for i := range runbookChecks {
		if regexp.MustCompile(runbookChecks[i].pattern).MatchString(cmd) {
			return &runbookChecks[i]
		}
	}
	return nil
}

// runbookEnvFile are the variables .cluster/env exports (cluster.Env).
var runbookEnvFile = []string{"NATS_URL", "SKEIN_URL", "SKEIN_TOKEN", "SKEIN_LEAF_URL", "SKEIN_ACCOUNTS_FILE", "SKEIN_SYS_NATS"}

// runbookRun is one run of the runbook against a cluster.
type runbookRun struct {
	c       *cluster.Cluster
	sid     string
	env     []string
	backup  string
	owner   string // as ACP_OWNERS named it
	prompts int

	historyAtBackup []byte
}

// TestRunbook runs docs/OPERATIONS.md: every command of its sh blocks, in
// order, with the nats CLI v0.5.0 and skein on PATH, against make
// cluster's topology on free ports, after a session has had a turn. Each
// must exit 0 and print what its runbookCheck says; commands that run until
// interrupted must print a record first. The setup block runs against the
// cluster's saved state (see setup). The services-stopped block (the
// restore) runs with the services stopped, after which the session's
// history is what the backup held and a prompt works. Last, the checks the
// runbook says to wait on between nodes must fail with a node down and pass
// once it is back (see waitsWait). In -short, only the text is checked.
func TestRunbook(t *testing.T) {
	docBytes, err := os.ReadFile(runbookPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(docBytes)
	blocks, err := parseRunbook(doc)
	if err != nil {
		t.Fatalf("%s: %v", runbookPath, err)
	}
	checkRunbookText(t, blocks, doc)
	if t.Failed() {
		return
	}
	if testing.Short() {
		t.Skip("the runbook's text is checked; running its commands starts a three-node cluster, skipped in -short")
	}

	natsCLI := buildNatsCLI(t)
	c := startCluster(t, cluster.Options{})
	rb := &runbookRun{c: c, sid: "runbook", backup: t.TempDir()}

	// PATH: nats, and skein.
	bin := t.TempDir()
	if err := os.Symlink(natsCLI, filepath.Join(bin, "nats")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(skeinBin(t), filepath.Join(bin, "skein")); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir() // no nats CLI context of the user's
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "NATS_") || strings.HasPrefix(k, "SKEIN_") || k == "HOME" || k == "XDG_CONFIG_HOME" || k == "PATH" {
			continue
		}
		rb.env = append(rb.env, kv)
	}
	rb.env = append(rb.env,
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		// .cluster/env
		"NATS_URL="+c.URL(cluster.UserOps), "SKEIN_URL="+c.HTTP[0], "SKEIN_TOKEN="+c.Token,
		"SKEIN_LEAF_URL="+c.LeafURL(), "SKEIN_ACCOUNTS_FILE="+c.AccountsFile(), "SKEIN_SYS_NATS="+c.URL(cluster.UserSys),
		// what the runbook asks the operator to set
		"SID="+rb.sid, "NATS_SYS_URL="+c.URL(cluster.UserSys), "NATS_READER_URL="+c.URL(cluster.UserReader),
		fmt.Sprintf("NATS_MONITOR=http://127.0.0.1:%d", c.MonitorPorts[0]),
		"BACKUP="+rb.backup,
	)

	rb.prompt(t)
	for _, b := range blocks {
		if b.noTest {
			continue
		}
		if b.setup {
			rb.setup(t, b)
			continue
		}
		if b.offline {
			rb.offline(t, b)
			continue
		}
		for _, cmd := range b.commands {
			rb.run(t, cmd)
		}
	}
	rb.waitsWait(t, blocks)
}

// waitsWait checks that what the runbook says to wait on before the next
// node is a real condition: with node n1 (the one $NATS_MONITOR names)
// stopped, every such check fails, and once it is back they all pass
// again.
func (rb *runbookRun) waitsWait(t *testing.T, blocks []runbookBlock) {
	t.Helper()
	var waits []runbookCommand
	for _, b := range blocks {
		for _, cmd := range b.commands {
			if chk := checkFor(cmd.text); !b.noTest && !b.offline && chk != nil && chk.poll && !slices.ContainsFunc(waits, func(w runbookCommand) bool { return w.text == cmd.text }) {
				waits = append(waits, cmd)
			}
		}
	}
	if len(waits) == 0 {
		t.Fatal("the runbook says to wait on nothing between nodes")
	}
	n1 := rb.c.Node("n1")
	if err := n1.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range waits {
		if out, err := rb.exec(t, cmd.text, time.Minute); err == nil {
			t.Errorf("%s:%d: %s: exit 0 with node n1 down:\n%s", runbookPath, cmd.line, cmd.text, out)
		} else {
			t.Logf("%s:%d: %s: with n1 down: %v", runbookPath, cmd.line, cmd.text, err)
		}
	}
	if err := n1.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range waits {
		rb.run(t, cmd)
	}
}

// setup runs the shell's set-up block as a script, in a directory whose
// .cluster is the test cluster's state (cluster.json as make cluster saves
// it, and an env file as it writes one), without the variables the test
// sets itself. Every variable the block exports must be set, and every NATS
// URL with credentials must carry the password of its user: the block reads
// cluster.json as make cluster writes it. Its ports are make cluster's
// fixed ones, so the test goes on with its own values.
func (rb *runbookRun) setup(t *testing.T, b runbookBlock) {
	t.Helper()
	if err := rb.c.Save(); err != nil {
		t.Fatal(err)
	}
	// What ops/tools/cluster writes as <dir>/env.
	if err := os.WriteFile(filepath.Join(rb.c.Dir, "env"), []byte(rb.c.Env()), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(rb.c.Dir, filepath.Join(dir, ".cluster")); err != nil {
		t.Fatal(err)
	}
	var script []string
	var exported []string
	for _, c := range b.commands {
		script = append(script, c.text)
		if name, ok := strings.CutPrefix(c.text, "export "); ok {
			name, _, _ = strings.Cut(name, "=")
			exported = append(exported, name)
		}
	}
	script = append(script, "env")
	cmd := exec.CommandContext(t.Context(), "bash", "-e", "-o", "pipefail", "-c", strings.Join(script, "\n"))
	cmd.Dir = dir
	for _, kv := range rb.env {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains(exported, k) && !slices.Contains(runbookEnvFile, k) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s:%d: the set-up block: %v\n%s", runbookPath, b.line, err, out)
	}
	got := map[string]string{}
	for l := range strings.Lines(string(out)) {
		if k, v, ok := strings.Cut(strings.TrimSuffix(l, "\n"), "="); ok {
			got[k] = v
		}
	}
	for _, k := range append(exported, runbookEnvFile...) {
		if got[k] == "" {
			t.Errorf("%s:%d: the set-up block leaves %s unset", runbookPath, b.line, k)
		}
	}
	if got["SKEIN_TOKEN"] != rb.c.Token {
		t.Errorf("%s:%d: the set-up block's SKEIN_TOKEN is not the cluster's admin token", runbookPath, b.line)
	}
	for k, v := range got {
		for raw := range strings.SplitSeq(v, ",") {
			u, err := url.Parse(raw)
			if err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.User == nil {
				continue
			}
			pw, _ := u.User.Password()
			if want, ok := rb.c.Passwords[u.User.Username()]; !ok || pw != want {
				t.Errorf("%s:%d: the set-up block's %s has user %s with a password that is not the cluster's", runbookPath, b.line, k, u.User.Username())
			}
		}
	}
	if !t.Failed() {
		t.Logf("%s:%d: the set-up block exports %s: ok", runbookPath, b.line, strings.Join(exported, ", "))
	}
}

// offline runs a services-stopped block: the services stop, the block
// runs, the restored bucket lists the session every time, the services
// start again; then the session's history is what the last backup held,
// and a prompt works.
func (rb *runbookRun) offline(t *testing.T, b runbookBlock) {
	t.Helper()
	for _, p := range rb.c.Services {
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range b.commands {
		rb.run(t, cmd)
	}
	// The block ends with skein provision, which waits until every
	// stream serves its consumers: from then on, each listing of the
	// restored bucket (a consumer on any of its replicas) lists the
	// session at once, with no retry and no leader step-down.
	for i := range 6 {
		out, err := rb.exec(t, "nats kv ls ACP_SESSIONS", 30*time.Second)
		if err != nil || !regexp.MustCompile(`(?m)^default\.`+regexp.QuoteMeta(rb.sid)+`$`).MatchString(out) {
			t.Errorf("%s:%d: after the restore block, nats kv ls ACP_SESSIONS (listing %d): %v, does not list default.%s:\n%s", runbookPath, b.line, i+1, err, rb.sid, out)
		}
	}
	for _, p := range rb.c.Services {
		if err := p.Restart(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	rb.owner = "" // the replicas restarted with new instance IDs
	if rb.historyAtBackup == nil {
		t.Fatalf("%s:%d: a services-stopped block before any backup of ACP_LOG", runbookPath, b.line)
	}
	if got := rb.history(t); !sameJSON(t, got, rb.historyAtBackup) {
		t.Errorf("after the restore, the history of %s is\n%s\nwant, as backed up,\n%s", rb.sid, got, rb.historyAtBackup)
	}
	rb.prompt(t)
}

// run runs one command as the runbook shows it, in bash (pipefail), and
// checks it.
func (rb *runbookRun) run(t *testing.T, cmd runbookCommand) {
	t.Helper()
	chk := checkFor(cmd.text)
	want := make([]*regexp.Regexp, len(chk.want))
	for i, w := range chk.want {
		want[i] = regexp.MustCompile(strings.ReplaceAll(w, "{{SID}}", regexp.QuoteMeta(rb.sid)))
	}
	where := fmt.Sprintf("%s:%d: %s", runbookPath, cmd.line, cmd.text)
	if chk.stream {
		rb.stream(t, where, cmd.text, want[0])
		return
	}
	deadline := time.Now().Add(time.Minute)
	attempts := 1
	for {
		// A command that does not end in time fails: the runbook holds
		// none that may wait for ever.
		out, err := rb.exec(t, cmd.text, 30*time.Second)
		var missing []string
		for _, w := range want {
			if !w.MatchString(out) {
				missing = append(missing, w.String())
			}
		}
		if err == nil && len(missing) == 0 {
			t.Logf("%s: ok", where)
			if chk.after != nil {
				chk.after(t, rb, out)
			}
			return
		}
		if err != nil && chk.again != nil && attempts < 3 && chk.again(rb, t, out) {
			attempts++
			t.Logf("%s: %v, run again as the runbook says:\n%s", where, err, out)
			continue
		}
		if chk.poll {
			t.Logf("%s: not yet (%v): %s", where, err, strings.TrimSpace(out))
		}
		if !chk.poll || time.Now().After(deadline) {
			t.Fatalf("%s: %v, output missing %q:\n%s", where, err, missing, out)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(500 * time.Millisecond): // the interval of a poll the runbook asks the operator to make
		}
	}
}

func (rb *runbookRun) command(ctx context.Context, line string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
	cmd.Env = rb.env
	cmd.Dir = rb.backup
	// Its own process group, so that the shell, nats and the skein it runs
	// for --translate all end with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// exec runs line to its end, within d, and returns its output. A command
// still running after d is killed, and the error is errHung.
func (rb *runbookRun) exec(t *testing.T, line string, d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	out, err := rb.command(ctx, line).CombinedOutput()
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w after %v (%v)", errHung, d, err)
	}
	return string(out), err
}

// errHung is the error of a command that did not end in time.
var errHung = errors.New("still running")

// stream runs a command that runs until interrupted until a line of its
// output matches want. Once it has subscribed (a new connection of the ops
// or reader user holds a subscription on a node), and while no line has
// come, a turn is run so that there is something to print.
func (rb *runbookRun) stream(t *testing.T, where, line string, want *regexp.Regexp) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := rb.command(ctx, line)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	before := rb.opsSubscribers(t)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	var seen []string
	prompted := 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastPrompt := time.Time{}
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("%s: ended before it printed a line matching %s: %s\n%s", where, want, strings.Join(seen, "\n"), stderr.String())
			}
			seen = append(seen, l)
			if !want.MatchString(l) {
				continue
			}
			// Interrupted as an operator would, with Ctrl-C.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
			go func() {
				for range lines {
				}
			}()
			_ = cmd.Wait()
			t.Logf("%s: ok: %s", where, l)
			return
		case <-tick.C:
			// A turn once it listens, and another if the first went
			// unseen (a subscription made between a node's report and
			// the turn's records reaching it): at most three.
			if prompted < 3 && time.Since(lastPrompt) > 15*time.Second && rb.subscribedSince(t, before) {
				rb.prompt(t)
				prompted++
				lastPrompt = time.Now()
			}
		case <-ctx.Done():
			t.Fatalf("%s: no line matching %s within 2 minutes (%d turns run); it printed:\n%s\n%s", where, want, prompted, strings.Join(seen, "\n"), stderr.String())
		}
	}
}

// opsSubscribers returns the connections (node and client ID) of the ops
// and reader users that hold a subscription outside their inbox, on every
// node: the commands the runbook runs (the test itself connects as neither).
func (rb *runbookRun) opsSubscribers(t *testing.T) map[string]bool {
	t.Helper()
	conns := map[string]bool{}
	for i, port := range rb.c.MonitorPorts {
		var connz struct {
			Connections []struct {
				CID  uint64   `json:"cid"`
				User string   `json:"authorized_user"`
				Subs []string `json:"subscriptions_list"`
			} `json:"connections"`
		}
		if err := getJSON(t.Context(), fmt.Sprintf("http://127.0.0.1:%d/connz?subs=1&auth=1", port), &connz); err != nil {
			continue // a node restarting: seen at the next look
		}
		for _, c := range connz.Connections {
			if (c.User == cluster.UserOps || c.User == cluster.UserReader) && slices.ContainsFunc(c.Subs, func(s string) bool { return !strings.HasPrefix(s, "_INBOX.") }) {
				conns[fmt.Sprintf("%d/%d", i, c.CID)] = true
			}
		}
	}
	return conns
}

// subscribedSince reports whether a connection of the ops or reader user
// subscribes that did not before.
func (rb *runbookRun) subscribedSince(t *testing.T, before map[string]bool) bool {
	t.Helper()
	for c := range rb.opsSubscribers(t) {
		if !before[c] {
			return true
		}
	}
	return false
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// prompt opens the session (once) and runs a turn on it.
func (rb *runbookRun) prompt(t *testing.T) {
	t.Helper()
	base := rb.c.HTTP[0] + "/v1/sessions/" + rb.sid
	if code, body := clusterDo(t.Context(), rb.c, http.MethodPut, base, `{"agent":"test"}`); code != http.StatusOK {
		t.Fatalf("open %s: %d %s", rb.sid, code, body)
	}
	rb.prompts++
	text := fmt.Sprintf("say hello from the runbook, turn %d", rb.prompts)
	code, body := clusterDo(t.Context(), rb.c, http.MethodPost, base+"/prompt", `{"content":[{"type":"text","text":"`+text+`"}]}`)
	if code != http.StatusOK || !strings.Contains(string(body), "end_turn") {
		t.Fatalf("prompt %s: %d %s", rb.sid, code, body)
	}
}

// history returns the session's history from the start, as the gateway
// answers it.
func (rb *runbookRun) history(t *testing.T) []byte {
	t.Helper()
	code, body := clusterDo(t.Context(), rb.c, http.MethodGet, rb.c.HTTP[0]+"/v1/sessions/"+rb.sid+"/history?after=0&limit=1000", "")
	if code != http.StatusOK {
		t.Fatalf("history of %s: %d %s", rb.sid, code, body)
	}
	return body
}

// backedUp checks that a backup of stream is in BACKUP.
func (rb *runbookRun) backedUp(t *testing.T, stream string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(rb.backup, stream))
	if err != nil || len(entries) == 0 {
		t.Errorf("nats backup stream %s left nothing in %s: %v", stream, filepath.Join(rb.backup, stream), err)
	}
}

// restoreRaced is what the runbook says of a restore that failed with "no
// responders": nats-server answered it before the node the client is on
// learned where its data goes, and it keeps the stream it began until it is
// deleted. The stream is deleted (until stream info no longer finds it),
// and the restore is run again.
func (rb *runbookRun) restoreRaced(t *testing.T, out string) bool {
	t.Helper()
	if !strings.Contains(out, "no responders available") {
		return false
	}
	m := regexp.MustCompile(`Starting restore of Stream "([A-Z_]+)"`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("a failed restore that names no stream:\n%s", out)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		rm, rmErr := rb.exec(t, "nats stream rm "+m[1]+" -f", 30*time.Second)
		info, err := rb.exec(t, "nats stream info "+m[1], 30*time.Second)
		if err != nil && strings.Contains(info, "stream not found") {
			return true
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream %s of a failed restore is still there after a minute: %v\n%s\n%v\n%s", m[1], rmErr, rm, err, info)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(500 * time.Millisecond): // the operator's poll, as above
		}
	}
}
