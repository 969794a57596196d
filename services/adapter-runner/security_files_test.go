package adapterrunner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
)

// The security suite's attacks through the files an agent makes in its own
// workspace: a FIFO, which blocks whoever opens it until a writer (or
// reader) comes, named by a download or by a prompt's attachment; and the
// runner's upload slots, taken by one principal.

// openFDs is how many descriptors this process holds.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// threads is how many threads this process runs (/proc/self/status).
func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads in /proc/self/status")
	return 0
}

// mkfifo makes a FIFO at p, and, at the test's end, opens its other end
// once, so that whatever still waits in an open of it (the runner, before
// the fix) is let go and the runner can stop.
func mkfifo(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, flag := range []int{syscall.O_WRONLY, syscall.O_RDONLY} {
			if fd, err := syscall.Open(p, flag|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0); err == nil {
				syscall.Close(fd)
			}
		}
	})
}

// settled waits, up to a bound, until this process holds at most fds
// descriptors and runs at most goroutines goroutines; it fails the test
// with what it last saw.
func settled(t *testing.T, what string, fds, goroutines int) {
	t.Helper()
	var gotFDs, gotG int
	err := testutil.PollWithin(t.Context(), 15*time.Second, what, func() (bool, error) {
		gotFDs, gotG = openFDs(t), runtime.NumGoroutine()
		return gotFDs <= fds && gotG <= goroutines, nil
	})
	if err != nil {
		t.Errorf("%s: %d descriptors (were %d), %d goroutines (were %d), %d threads", what, gotFDs, fds, gotG, goroutines, threads(t))
	}
}

// hostile sends n requests of session sid from workers goroutines, each
// waiting at most wait for its answer, and returns how many answered
// with each code ("ok" for a success, "no answer" for none within wait).
func hostile(t *testing.T, h *harness, sid string, n, workers int, wait time.Duration, req func(i int) *events.RunnerFileRequest) map[string]int {
	t.Helper()
	var mu sync.Mutex
	got := map[string]int{}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				ctx, cancel := context.WithTimeout(t.Context(), wait)
				_, err := rpc.Call[events.FileReadResponse](ctx, h.nc, events.RunnerSubject("r1", events.RunnerFile), req(i), header(sid, ""))
				cancel()
				code := "ok"
				switch {
				case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
					code = "no answer"
				case err != nil:
					code = string(events.AsError(err).Code)
				}
				mu.Lock()
				got[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return got
}

// A FIFO the agent made, downloaded again and again: each read is refused
// at once, typed, and the runner holds no more descriptors, goroutines or
// threads after them than before. (Before, each read blocked a thread and
// a descriptor in open() for ever.)
func TestSecurityFileFIFODownload(t *testing.T) {
	h := start(t)
	cwd := h.cwdOf("s1")
	mkfifo(t, filepath.Join(cwd, "trap"))
	mkfifo(t, filepath.Join(cwd, events.AttachmentDir, "evil.txt"))
	if err := os.WriteFile(filepath.Join(cwd, "ok.txt"), []byte("ok"), 0o600); err != nil {
		t.Fatal(err)
	}
	read := func(p string) *events.RunnerFileRequest {
		return &events.RunnerFileRequest{Read: &events.FileReadRequest{Path: p}}
	}
	// Warm up: the first request makes what every later one shares.
	if _, err := fileCall[events.FileReadResponse](t, h, "s1", read("ok.txt")); err != nil {
		t.Fatal(err)
	}
	fds, goroutines, before := openFDs(t), runtime.NumGoroutine(), threads(t)

	const n = 2000
	got := hostile(t, h, "s1", n, 100, 3*time.Second, func(i int) *events.RunnerFileRequest {
		switch i % 3 {
		case 0:
			return read("trap")
		case 1:
			return read(events.AttachmentDir + "/evil.txt")
		}
		return &events.RunnerFileRequest{List: &events.FileListRequest{Path: "trap"}}
	})
	t.Logf("%d reads and lists of FIFOs: %v; threads %d before, %d after", n, got, before, threads(t))
	// Each is refused at once: the FIFO for what it is, or, past the
	// session's file ops in flight, the request for its number.
	if refused := got[string(events.CodeInvalidRequest)] + got[string(events.CodeRateLimited)]; refused != n || got[string(events.CodeInvalidRequest)] == 0 {
		t.Errorf("%d reads and lists of FIFOs answered %v, want each %s or %s", n, got, events.CodeInvalidRequest, events.CodeRateLimited)
	}
	settled(t, "the runner to hold what it held before the FIFO reads", fds, goroutines)
	// The runner still serves the session.
	if r, err := fileCall[events.FileReadResponse](t, h, "s1", read("ok.txt")); err != nil || string(r.Data) != "ok" {
		t.Errorf("read after the attack = %v, %v", r, err)
	}
}

// promptOf sends turn turnID's prompt content to session sid's adapter
// and returns the runner's answer.
func (h *harness) promptOf(ctx context.Context, sid, processID, turnID string, content []byte) error {
	_, err := rpc.Call[events.RunnerAck](ctx, h.nc, events.RunnerSubject("r1", events.RunnerPrompt),
		&events.RunnerPromptRequest{TurnID: turnID, Prompt: content}, header(sid, processID))
	return err
}

// reports returns what each process's agent reported of its turn's
// prompt (turns: the turn by process ID), once every result came: the
// test agent writes one "block <json>" line per block that is not text,
// and says what a "say" line asks.
func (h *harness) reports(t *testing.T, turns map[string]string) map[string]string {
	t.Helper()
	texts := map[string]*strings.Builder{}
	out := map[string]string{}
	deadline := time.After(20 * time.Second)
	for len(out) < len(turns) {
		select {
		case m := <-h.io:
			pid := m.Header.Get(events.HeaderProcessID)
			if _, ok := turns[pid]; !ok {
				continue
			}
			v, err := events.Unmarshal(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			if texts[pid] == nil {
				texts[pid] = &strings.Builder{}
			}
			if r, ok := v.(*events.AdapterPromptResult); ok && r.TurnID == turns[pid] {
				out[pid] = texts[pid].String()
				continue
			}
			for _, s := range updateTexts([]events.Variant{v}) {
				texts[pid].WriteString(s)
			}
		case <-deadline:
			t.Fatalf("results of %v in 20s: only %v", turns, out)
		}
	}
	return out
}

// A prompt naming an attachment the agent turned into a FIFO: another
// session's prompt on the same runner is delivered all the same, and the
// FIFO's prompt too, its attachment as a file:// link that says no size
// (a FIFO is never opened for reading: the agent finds what it made).
// Before, the one-at-a-time prompt handler blocked in open(), and every
// prompt of every session on the runner failed.
func TestSecurityPromptFIFOAttachment(t *testing.T) {
	h := start(t)
	h.create(t, "evil", "pe", "test")
	h.create(t, "bob", "pb", "test")
	fifo := filepath.Join(h.cwdOf("evil"), events.AttachmentDir, "evil.txt")
	mkfifo(t, fifo)

	content, _ := json.Marshal([]map[string]any{
		{"type": "text", "text": "blocks"},
		{"type": "resource_link", "uri": events.AttachmentScheme + "evil.txt", "name": "evil.txt"},
	})
	// The FIFO's prompt is on the server before bob's is sent, from the
	// same connection: the runner's subscription gets it first, as in the
	// attack.
	body, err := events.Marshal(&events.RunnerPromptRequest{TurnID: "t-evil", Prompt: content})
	if err != nil {
		t.Fatal(err)
	}
	inbox := nats.NewInbox()
	replies, err := h.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = replies.Unsubscribe() }()
	if err := h.nc.PublishMsg(&nats.Msg{Subject: events.RunnerSubject("r1", events.RunnerPrompt), Reply: inbox, Data: body, Header: header("evil", "pe")}); err != nil {
		t.Fatal(err)
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	bob, _ := json.Marshal([]map[string]any{{"type": "text", "text": "say hi bob"}})
	if err := h.promptOf(ctx, "bob", "pb", "t-bob", bob); err != nil {
		t.Fatalf("bob's prompt, after one naming a FIFO: %v", err)
	}
	m, err := replies.NextMsg(5 * time.Second)
	if err == nil {
		err = rpc.ReplyError(m)
	}
	if err != nil {
		t.Fatalf("the prompt naming a FIFO: %v, want it delivered with a link", err)
	}
	got := h.reports(t, map[string]string{"pb": "t-bob", "pe": "t-evil"})
	if !strings.Contains(got["pb"], "hi bob") {
		t.Errorf("bob's agent said %q", got["pb"])
	}
	report := got["pe"]
	abs, err := filepath.EvalSymlinks(filepath.Dir(fifo))
	if err != nil {
		t.Fatal(err)
	}
	var block map[string]any
	if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(report), "block ")), &block); err != nil {
		t.Fatalf("agent reported %q: %v", report, err)
	}
	if block["type"] != "resource_link" || block["uri"] != "file://"+abs+"/evil.txt" || block["size"] != nil {
		t.Errorf("the FIFO reached the agent as %v, want a link without a size", block)
	}
}

// beginAs begins an upload in session sid of namespace ns, for principal
// p (the session service's Acp-Principal).
func (h *harness) beginAs(t *testing.T, ns events.Namespace, sid, p string) (*events.FileTransferResponse, error) {
	t.Helper()
	hdr := nats.Header{
		events.HeaderNamespace: []string{string(ns)},
		events.HeaderSessionID: []string{sid},
		events.HeaderPrincipal: []string{p},
	}
	return rpc.Call[events.FileTransferResponse](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerFile),
		&events.RunnerFileRequest{Begin: &events.FileBeginRequest{Name: "u.bin", Size: 10}}, hdr)
}

// One principal begins every upload it can, 8 in each of 40 sessions of
// its namespace (none ever written: they hold their slot for the TTL):
// it is stopped at its own bound, and another principal of another
// namespace still uploads. A second principal of the first namespace is
// stopped at the namespace's bound.
func TestSecurityUploadSlotsPerPrincipal(t *testing.T) {
	h := start(t)
	took := 0
	for s := range 40 {
		for range 8 {
			if _, err := h.beginAs(t, "team-a", fmt.Sprintf("m%02d", s), "mallory"); err == nil {
				took++
			} else if e := events.AsError(err); e.Code != events.CodeRateLimited {
				t.Fatalf("begin = %v, want success or %s", err, events.CodeRateLimited)
			}
		}
	}
	t.Logf("mallory holds %d upload slots of the runner's", took)
	if took > adapterrunner.DefaultUploadsPerPrincipal {
		t.Errorf("one principal holds %d uploads, more than its bound %d", took, adapterrunner.DefaultUploadsPerPrincipal)
	}
	if _, err := h.beginAs(t, "team-b", "b1", "bob"); err != nil {
		t.Errorf("bob's upload while mallory holds %d: %v", took, err)
	}
	// A second principal of team-a: the namespace's bound stops it.
	more := 0
	for s := range 40 {
		for range 8 {
			if _, err := h.beginAs(t, "team-a", fmt.Sprintf("n%02d", s), "mallet"); err == nil {
				more++
			}
		}
	}
	if took+more > adapterrunner.DefaultUploadsPerNamespace {
		t.Errorf("team-a holds %d uploads, more than its bound %d", took+more, adapterrunner.DefaultUploadsPerNamespace)
	}
	if _, err := h.beginAs(t, "team-b", "b2", "bob"); err != nil {
		t.Errorf("bob's upload while team-a holds %d: %v", took+more, err)
	}
}

// A deleted session's uploads end with it: their slots are free and their
// partial files gone, at once. Unloading (stopping the adapter) keeps them:
// an upload may outlive its session's adapter.
func TestSecurityDeleteReleasesUploads(t *testing.T) {
	h := start(t)
	h.create(t, "s1", "p1", "test")
	var ids []string
	for range 8 {
		b, err := fileCall[events.FileTransferResponse](t, h, "s1", &events.RunnerFileRequest{Begin: &events.FileBeginRequest{Name: "half.bin", Size: 10}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fileCall[events.FileWriteResponse](t, h, "s1", &events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: b.TransferID, Data: []byte("01234")}}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, b.TransferID)
	}
	if _, err := fileCall[events.FileTransferResponse](t, h, "s2", &events.RunnerFileRequest{Begin: &events.FileBeginRequest{Name: "other.bin", Size: 10}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerStop), &events.AcpCloseSessionRequest{}, header("s1", "p1")); err != nil {
		t.Fatal(err)
	}
	if got := h.runner.Uploads(); got != 9 {
		t.Errorf("after an unload: %d uploads in progress, want the 9 begun", got)
	}
	_, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerRemove), &events.RunnerRemoveRequest{KeepWorkspace: true}, header("s1", ""))
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	if got := h.runner.Uploads(); got != 1 {
		t.Errorf("after the delete: %d uploads in progress, want s2's alone", got)
	}
	if left := incoming(t, h.cwdOf("s1")); len(left) != 0 {
		t.Errorf("partial files left after the delete: %v", left)
	}
	_, err = fileCall[events.FileWriteResponse](t, h, "s1", &events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: ids[0], Offset: 5, Data: []byte("56789")}})
	wantCode(t, "write after the delete", err, events.CodeFileNotFound, "")
	if len(incoming(t, h.cwdOf("s2"))) != 1 {
		t.Errorf("another session's upload went with the delete")
	}
}

// A file system that does not answer: each session has at most its
// slots of file ops in flight, and the runner its own; a request past
// either is refused at once, rate_limited, and one whose op outlasts the
// timeout is answered timeout, while its op keeps its slot. Once the file
// system answers, every slot is free again and the runner holds what it
// held before.
func TestSecurityFileOpsBounded(t *testing.T) {
	h := startWith(t, adapterrunner.Config{FileOps: 6, FileOpsPerSession: 3, FileOpTimeout: 300 * time.Millisecond})
	list := &events.RunnerFileRequest{List: &events.FileListRequest{}}
	mkdirs(t, h.cwdOf("s1"), h.cwdOf("s2"), h.cwdOf("s3"))
	if _, err := fileCall[events.FileListResponse](t, h, "s1", list); err != nil {
		t.Fatal(err)
	}
	fds, goroutines := openFDs(t), runtime.NumGoroutine()
	held, release := h.runner.HoldFileOps()
	defer release()

	call := func(sid string) error {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		_, err := rpc.Call[events.FileListResponse](ctx, h.nc, events.RunnerSubject("r1", events.RunnerFile), list, header(sid, ""))
		return err
	}
	slow := func(sid string, n int) chan error {
		errs := make(chan error, n)
		for range n {
			go func() { errs <- call(sid) }()
		}
		return errs
	}
	s1 := slow("s1", 3)
	testutil.Eventually(t, "s1's file ops to wait on the file system", func() bool { return held() == 3 })
	wantCode(t, "s1's fourth file op", call("s1"), events.CodeRateLimited, "file-ops-per-session")
	s2 := slow("s2", 3)
	testutil.Eventually(t, "s2's file ops to wait on the file system", func() bool { return held() >= 6 })
	wantCode(t, "a file op on a full runner", call("s3"), events.CodeRateLimited, "adapter-runner.file-ops")
	for _, errs := range []chan error{s1, s2} {
		for range 3 {
			wantCode(t, "a file op that outlasts the timeout", <-errs, events.CodeTimeout, "file-op-timeout")
		}
	}
	if got := h.runner.FileOpsInFlight(); got != 6 {
		t.Errorf("%d file ops in flight after their requests timed out, want the 6 still held", got)
	}

	release()
	testutil.Eventually(t, "the slots to be free", func() bool { return h.runner.FileOpsInFlight() == 0 })
	settled(t, "the runner to hold what it held before the file system hung", fds, goroutines)
	if _, err := fileCall[events.FileListResponse](t, h, "s1", list); err != nil {
		t.Errorf("a file op once the file system answers: %v", err)
	}
}

// A FIFO named as a folder to list (GET /v1/directories?path=…): refused
// at once, again and again, and the runner holds what it held before.
func TestSecurityDirectoriesFIFO(t *testing.T) {
	h := start(t)
	home := filepath.Join(h.dataDir, "workspaces", "default")
	mkdirs(t, filepath.Join(home, "proj"))
	trap := filepath.Join(home, "trap")
	mkfifo(t, trap)
	list := func(p string) error {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		_, err := rpc.Call[events.ListDirectoriesResponse](ctx, h.nc, events.APISubject("default", events.OpListDirectories), &events.ListDirectoriesRequest{Path: &p}, nil)
		return err
	}
	if err := list(filepath.Join(home, "proj")); err != nil {
		t.Fatal(err)
	}
	fds, goroutines := openFDs(t), runtime.NumGoroutine()
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range 20 {
				code := "ok"
				if err := list(trap); err != nil {
					code = string(events.AsError(err).Code)
				}
				mu.Lock()
				got[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("200 listings of a FIFO: %v", got)
	if got[string(events.CodeInvalidRequest)]+got[string(events.CodeRateLimited)] != 200 || got[string(events.CodeInvalidRequest)] == 0 {
		t.Errorf("200 listings of a FIFO answered %v, want each %s or %s", got, events.CodeInvalidRequest, events.CodeRateLimited)
	}
	settled(t, "the runner to hold what it held before the listings", fds, goroutines)
}

// The agent swaps an upload's partial file (it sees .incoming in its own
// directory) for a FIFO: the next chunk is refused at once, not written
// into the FIFO nor waited on, and so is the commit, which never links
// the FIFO into .skein-attachments.
func TestSecurityUploadPartSwappedForFIFO(t *testing.T) {
	h := start(t)
	begin := func() string {
		b, err := fileCall[events.FileTransferResponse](t, h, "s1", &events.RunnerFileRequest{Begin: &events.FileBeginRequest{Name: "up.txt", Size: 4}})
		if err != nil {
			t.Fatal(err)
		}
		return b.TransferID
	}
	part := func(id string) string {
		_, token, _ := strings.Cut(id, "~")
		return filepath.Join(h.cwdOf("s1"), events.AttachmentDir, events.AttachmentIncoming, token+".part")
	}
	swap := func(id string) {
		if err := os.Remove(part(id)); err != nil {
			t.Fatal(err)
		}
		mkfifo(t, part(id))
	}
	call := func(req *events.RunnerFileRequest) error {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		subject := events.RunnerSubject("r1", events.RunnerFile)
		if req.Commit != nil {
			_, err := rpc.Call[events.FileCommitResponse](ctx, h.nc, subject, req, header("s1", ""))
			return err
		}
		_, err := rpc.Call[events.FileWriteResponse](ctx, h.nc, subject, req, header("s1", ""))
		return err
	}

	written := begin()
	swap(written)
	wantCode(t, "a chunk into a FIFO", call(&events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: written, Data: []byte("data")}}), events.CodeInvalidRequest, "not a regular file")

	committed := begin()
	if err := call(&events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: committed, Data: []byte("data")}}); err != nil {
		t.Fatal(err)
	}
	swap(committed)
	wantCode(t, "the commit of a FIFO", call(&events.RunnerFileRequest{Commit: &events.FileCommitRequest{TransferID: committed}}), events.CodeInvalidRequest, "not a regular file")
	entries, err := os.ReadDir(filepath.Join(h.cwdOf("s1"), events.AttachmentDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != events.AttachmentIncoming {
			t.Errorf("%s holds %s (%v) after the refused commit", events.AttachmentDir, e.Name(), e.Type())
		}
	}
}
