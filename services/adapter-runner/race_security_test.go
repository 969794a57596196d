//go:build linux

package adapterrunner_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sys/unix"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
)

// The symlink race: team-a's agent swaps host/sub, a directory of its
// own, with host/lnk, a symlink to team-b's session directory, in a tight
// loop (renameat2 RENAME_EXCHANGE), while team-a opens sessions, lists,
// downloads, uploads and launches agents with cwd host/sub. Whatever the
// instant of each swap, nothing of team-b's is read, listed, written, or
// reachable by the launched agent: the runner resolves the cwd once,
// beneath team-a's own directory, and works through what it holds.
//
// Each operation is tried a fixed number of times (raceAttempts in all);
// a try either works in team-a's directory or is refused.
const raceReads, raceLists, raceDirs, raceUploads, raceLaunches = 300, 200, 200, 150, 150

func TestSecurityRaceSwappedCwd(t *testing.T) {
	requireLandlock(t, 1)
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire})
	ws := filepath.Join(h.dataDir, "workspaces")
	a, bsec := filepath.Join(ws, "team-a"), filepath.Join(ws, "team-b", "bsec")
	const secret = "bob-secret-5f1c"
	writeFile(t, filepath.Join(bsec, "secret.txt"), secret)
	mkdirs(t, filepath.Join(bsec, "bobdir"), filepath.Join(bsec, events.AttachmentDir), filepath.Join(a, "host", "sub", "alicedir"))
	// Alice's directory has a secret.txt of her own, so that a
	// download works, and shows whose it read.
	writeFile(t, filepath.Join(a, "host", "sub", "secret.txt"), "alice's own")
	giveToAdapters(t, a, filepath.Join(a, "host"), filepath.Join(a, "host", "sub"), filepath.Join(a, "host", "sub", "alicedir")) // alice's, as she made them
	bobsBefore := tree(t, bsec)
	sub, lnk := filepath.Join(a, "host", "sub"), filepath.Join(a, "host", "lnk")
	if err := os.Symlink(bsec, lnk); err != nil {
		t.Fatal(err)
	}

	stopSwapping := swap(t, sub, lnk)

	type tally struct{ tried, worked, crossed int }
	var mu sync.Mutex
	tallies := map[string]*tally{}
	count := func(op string, worked, crossed bool) {
		mu.Lock()
		defer mu.Unlock()
		tl := tallies[op]
		if tl == nil {
			tl = &tally{}
			tallies[op] = tl
		}
		tl.tried++
		if worked {
			tl.worked++
		}
		if crossed {
			tl.crossed++
		}
	}
	hdr := func(sid string) nats.Header {
		return nats.Header{
			events.HeaderNamespace: []string{"team-a"},
			events.HeaderSessionID: []string{sid},
			events.HeaderProcessID: []string{"p-" + sid},
		}
	}
	file := func(req *events.RunnerFileRequest) (events.Variant, error) {
		req.Cwd = sub
		return rpc.Request(t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerFile), req, hdr("files"))
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for range raceReads {
			v, err := file(&events.RunnerFileRequest{Read: &events.FileReadRequest{Path: "secret.txt"}})
			r, _ := v.(*events.FileReadResponse)
			count("download", err == nil, err == nil && r != nil && strings.Contains(string(r.Data), secret))
		}
	})
	wg.Go(func() {
		for range raceLists {
			v, err := file(&events.RunnerFileRequest{List: &events.FileListRequest{Path: "."}})
			r, _ := v.(*events.FileListResponse)
			crossed := r != nil && slices.ContainsFunc(r.Files, func(f events.FileInfo) bool { return f.Name == "bobdir" })
			count("list", err == nil, crossed)
		}
	})
	wg.Go(func() {
		for range raceDirs {
			p := sub
			r, err := rpc.Call[events.ListDirectoriesResponse](t.Context(), h.nc, events.APISubject("team-a", events.OpListDirectories),
				&events.ListDirectoriesRequest{Path: &p}, nil)
			crossed := err == nil && slices.ContainsFunc(r.Directories, func(d events.DirectoryEntry) bool { return d.Name == "bobdir" })
			count("directories", err == nil, crossed)
		}
	})
	wg.Go(func() {
		for range raceUploads {
			worked := func() bool {
				v, err := file(&events.RunnerFileRequest{Begin: &events.FileBeginRequest{Name: "planted.txt", Size: 5}})
				begun, _ := v.(*events.FileTransferResponse)
				if err != nil || begun == nil {
					return false
				}
				_, err = file(&events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: begun.TransferID, Data: []byte("alice")}})
				if err == nil {
					_, err = file(&events.RunnerFileRequest{Commit: &events.FileCommitRequest{TransferID: begun.TransferID}})
				}
				if err != nil { // its slot is needed for the next try
					_, _ = file(&events.RunnerFileRequest{Cancel: &events.FileCancelRequest{TransferID: begun.TransferID}})
				}
				return err == nil
			}()
			count("upload", worked, false) // crossings: what lands in team-b's attachments, counted below
		}
	})
	wg.Go(func() {
		for i := range raceLaunches {
			sid := "launch-" + strconv.Itoa(i)
			_, err := h.createAs(t, "team-a", sid, events.AcpCreateSessionRequest{Cwd: sub})
			if err != nil {
				count("launch", false, false)
				continue
			}
			got := raceProbe(t, h, hdr(sid), sid,
				"read secret.txt", "read "+filepath.Join(bsec, "secret.txt"),
				"write planted-by-agent.txt pwned", "write "+filepath.Join(bsec, "abs-planted.txt")+" pwned")
			crossed := slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, secret) })
			if !crossed && !slices.Contains(got, "read secret.txt: ok alice's own") {
				t.Errorf("a launched agent does not work in its own held cwd: %q", got)
			}
			if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerStop),
				&events.AcpCloseSessionRequest{}, hdr(sid)); err != nil {
				t.Errorf("stop %s: %v", sid, err)
			}
			count("launch", true, crossed)
		}
	})
	wg.Wait()
	swaps := stopSwapping()

	// What landed in team-b's directory: uploads that crossed (a
	// committed file, or a temporary one left behind) and the agents'
	// writes.
	planted := 0
	for _, p := range tree(t, bsec) {
		if !slices.Contains(bobsBefore, p) {
			planted++
			t.Logf("written into team-b's directory: %s", p)
			if strings.HasPrefix(p, events.AttachmentDir+"/") {
				tallies["upload"].crossed++
			}
		}
	}
	total := 0
	for _, op := range []string{"download", "list", "directories", "upload", "launch"} {
		tl := tallies[op]
		if tl == nil {
			tl = &tally{}
		}
		total += tl.tried
		t.Logf("%-11s %d tried, %d worked, %d crossed into team-b", op, tl.tried, tl.worked, tl.crossed)
		if tl.worked == 0 {
			t.Errorf("%s: none of %d worked: the race was not run", op, tl.tried)
		}
		if tl.crossed > 0 {
			t.Errorf("%s: %d of %d crossed into team-b's directory", op, tl.crossed, tl.tried)
		}
	}
	t.Logf("%d swaps; %d attempts; %d files written into team-b's directory", swaps, total, planted)
	if planted > 0 {
		t.Errorf("%d files were written into team-b's directory", planted)
	}
}

// tree lists every path under dir, relative to it.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// raceProbe runs script as one turn of session sid (headers hdr) and
// returns the agent's replies. Only one session runs at a time, so the
// records of sid are the ones on its subject.
func raceProbe(t *testing.T, h *harness, hdr nats.Header, sid string, script ...string) []string {
	t.Helper()
	content, _ := json.Marshal([]map[string]string{{"type": "text", "text": strings.Join(script, "\n")}})
	if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerPrompt),
		&events.RunnerPromptRequest{TurnID: "t-" + sid, Prompt: content}, hdr); err != nil {
		t.Errorf("prompt %s: %v", sid, err)
		return nil
	}
	subject := "acp.iotail." + strings.TrimPrefix(events.IOSubject("team-a", events.SessionID(sid), "r1"), "acp.io.")
	var before []events.Variant
	for {
		select {
		case m := <-h.io:
			if m.Subject != subject {
				continue
			}
			v, err := events.Unmarshal(m.Data)
			if err != nil {
				t.Fatalf("undecodable IO record: %v", err)
			}
			if _, ok := v.(*events.AdapterPromptResult); ok {
				return updateTexts(before)
			}
			before = append(before, v)
		case <-t.Context().Done():
			return nil
		case <-time.After(time.Minute):
			t.Fatalf("no end of session %s's probe turn", sid)
		}
	}
}

// Unconfined (adapter-runner.sandbox off), the adapter still starts in
// the directory the runner held, not in what its name leads to by the
// time the child changes into it: the child enters /proc/self/fd/N of
// the runner's descriptor. What an unconfined agent then does by absolute
// path is not the runner's to stop; its cwd is.
func TestSecurityRaceSwappedCwdUnconfined(t *testing.T) {
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxOff})
	ws := filepath.Join(h.dataDir, "workspaces")
	a, bsec := filepath.Join(ws, "team-a"), filepath.Join(ws, "team-b", "bsec")
	const secret = "bob-secret-5f1c"
	writeFile(t, filepath.Join(bsec, "secret.txt"), secret)
	writeFile(t, filepath.Join(a, "host", "sub", "secret.txt"), "alice's own")
	sub, lnk := filepath.Join(a, "host", "sub"), filepath.Join(a, "host", "lnk")
	if err := os.Symlink(bsec, lnk); err != nil {
		t.Fatal(err)
	}
	stopSwapping := swap(t, sub, lnk)
	worked, crossed := 0, 0
	for i := range raceLaunches {
		sid := "off-" + strconv.Itoa(i)
		hdr := nats.Header{
			events.HeaderNamespace: []string{"team-a"},
			events.HeaderSessionID: []string{sid},
			events.HeaderProcessID: []string{"p-" + sid},
		}
		if _, err := h.createAs(t, "team-a", sid, events.AcpCreateSessionRequest{Cwd: sub}); err != nil {
			continue
		}
		worked++
		got := raceProbe(t, h, hdr, sid, "read secret.txt")
		if slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, secret) }) {
			crossed++
		} else if !slices.Contains(got, "read secret.txt: ok alice's own") {
			t.Errorf("an unconfined agent does not work in its own held cwd: %q", got)
		}
		if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerStop),
			&events.AcpCloseSessionRequest{}, hdr); err != nil {
			t.Errorf("stop %s: %v", sid, err)
		}
	}
	stopSwapping()
	t.Logf("unconfined launch: %d tried, %d worked, %d started in team-b's directory", raceLaunches, worked, crossed)
	if worked == 0 {
		t.Errorf("no launch worked: the race was not run")
	}
	if crossed > 0 {
		t.Errorf("%d of %d unconfined agents started in team-b's directory", crossed, raceLaunches)
	}
}

// The launcher closes the working directories it inherited before it
// execs the adapter: an agent holding a descriptor of its cwd or of an
// additional directory would keep it past any later change of them, and
// hand it to whatever it spawns.
func TestSecurityAgentInheritsNoHeldDirectory(t *testing.T) {
	requireLandlock(t, 1)
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire})
	ws := filepath.Join(h.dataDir, "workspaces")
	extra := filepath.Join(ws, "default", "shared")
	mkdirs(t, extra)
	resp, err := h.createWith(t, "holds", events.AcpCreateSessionRequest{AdditionalDirectories: []string{extra}})
	if err != nil {
		t.Fatal(err)
	}
	fdDir := "/proc/" + strconv.Itoa(int(*resp.Pid)) + "/fd"
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err == nil && strings.HasPrefix(target, ws) {
			t.Errorf("the adapter holds descriptor %s of %s", e.Name(), target)
		}
	}
}

// A descriptor the runner inherited without close-on-exec, from whatever
// started it (a shell's redirection, a supervisor's socket), does not
// reach its adapters.
func TestSecurityAgentInheritsNoRunnerDescriptor(t *testing.T) {
	requireLandlock(t, 1)
	secret := filepath.Join(t.TempDir(), "runner-only")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(secret, syscall.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	h := startWith(t, adapterrunner.Config{Sandbox: adapterrunner.SandboxRequire})
	resp, err := h.createWith(t, "inherits", events.AcpCreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	fdDir := "/proc/" + strconv.Itoa(int(*resp.Pid)) + "/fd"
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(fdDir, e.Name())); err == nil && target == secret {
			t.Errorf("the adapter holds the runner's descriptor %s of %s", e.Name(), target)
		}
	}
}

// swap exchanges the names a and b (a directory and a symlink) with
// renameat2(RENAME_EXCHANGE) as fast as it can, until the function it
// returns is called, which returns how many swaps were made.
func swap(t *testing.T, a, b string) (stop func() int64) {
	t.Helper()
	var swaps atomic.Int64
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("renameat2: %v", err)
				return
			}
			swaps.Add(1)
		}
	}()
	return func() int64 {
		close(quit)
		<-done
		return swaps.Load()
	}
}
