package adapterrunner_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	adapterrunner "skein.dev/services/adapter-runner"
)

// fileCall sends one file op of session sid to the runner, as the session
// service does (the session's default cwd).
func fileCall[T any, PT interface {
	*T
	events.Variant
}](t *testing.T, h *harness, sid string, req *events.RunnerFileRequest) (PT, error) {
	t.Helper()
	return rpc.Call[T, PT](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerFile), req, header(sid, ""))
}

// cwdOf is the default working directory of session sid on h's runner.
func (h *harness) cwdOf(sid string) string {
	return filepath.Join(h.dataDir, "workspaces", "default", sid)
}

// upload uploads data as name in chunks of chunk bytes and commits it.
// It reports failures as its error, so that it may run in a goroutine.
func upload(t *testing.T, h *harness, sid, name string, data []byte, chunk int) (*events.FileInfo, error) {
	t.Helper()
	begun, err := fileCall[events.FileTransferResponse](t, h, sid, &events.RunnerFileRequest{Begin: &events.FileBeginRequest{Name: name, Size: int64(len(data))}})
	if err != nil {
		return nil, err
	}
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		w, err := fileCall[events.FileWriteResponse](t, h, sid, &events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: begun.TransferID, Offset: int64(off), Data: data[off:end]}})
		if err != nil {
			return nil, err
		}
		if w.Offset != int64(end) {
			return nil, fmt.Errorf("write at %d answered offset %d, want %d", off, w.Offset, end)
		}
	}
	c, err := fileCall[events.FileCommitResponse](t, h, sid, &events.RunnerFileRequest{Commit: &events.FileCommitRequest{TransferID: begun.TransferID}})
	if err != nil {
		return nil, err
	}
	return &c.File, nil
}

// incoming lists the temporary files of uploads in progress in cwd.
func incoming(t *testing.T, cwd string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(cwd, events.AttachmentDir, events.AttachmentIncoming))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestUploadListRead: an upload in chunks lands whole under
// .skein-attachments, invisible until committed; listing and reading
// find it.
func TestUploadListRead(t *testing.T) {
	h := start(t)
	data := bytes.Repeat([]byte("0123456789"), 1000)
	begun, err := fileCall[events.FileTransferResponse](t, h, "s1", &events.RunnerFileRequest{Begin: &events.FileBeginRequest{Name: "notes.txt", Size: int64(len(data))}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := events.TransferRunner(begun.TransferID); err != nil || r != "r1" {
		t.Errorf("transfer %q names runner %q, %v", begun.TransferID, r, err)
	}
	if begun.ChunkSize != events.FileChunkSize(h.nc.MaxPayload()) || begun.MaxBytes != events.DefaultMaxFileBytes {
		t.Errorf("begin = %+v", begun)
	}
	if _, err := fileCall[events.FileWriteResponse](t, h, "s1", &events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: begun.TransferID, Data: data[:4000]}}); err != nil {
		t.Fatal(err)
	}
	// Not committed: nothing to list or read, and no name taken.
	list, err := fileCall[events.FileListResponse](t, h, "s1", &events.RunnerFileRequest{List: &events.FileListRequest{Path: events.AttachmentDir}})
	if err != nil || len(list.Files) != 0 {
		t.Errorf("list before commit = %+v, %v; want empty", list, err)
	}
	_, err = fileCall[events.FileReadResponse](t, h, "s1", &events.RunnerFileRequest{Read: &events.FileReadRequest{Path: events.AttachmentDir + "/notes.txt"}})
	wantCode(t, "read before commit", err, events.CodeFileNotFound, "")
	_, err = fileCall[events.FileCommitResponse](t, h, "s1", &events.RunnerFileRequest{Commit: &events.FileCommitRequest{TransferID: begun.TransferID}})
	wantCode(t, "commit of an incomplete upload", err, events.CodeInvalidRequest, "")
	// Another session does not reach the transfer.
	_, err = fileCall[events.FileWriteResponse](t, h, "s2", &events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: begun.TransferID, Offset: 4000, Data: data[4000:]}})
	wantCode(t, "write from another session", err, events.CodeFileNotFound, "")

	if _, err := fileCall[events.FileWriteResponse](t, h, "s1", &events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: begun.TransferID, Offset: 4000, Data: data[4000:]}}); err != nil {
		t.Fatal(err)
	}
	c, err := fileCall[events.FileCommitResponse](t, h, "s1", &events.RunnerFileRequest{Commit: &events.FileCommitRequest{TransferID: begun.TransferID}})
	if err != nil {
		t.Fatal(err)
	}
	if c.File.Name != "notes.txt" || c.File.Path != ".skein-attachments/notes.txt" || c.File.Size != int64(len(data)) || !strings.HasPrefix(c.File.MediaType, "text/plain") {
		t.Errorf("committed %+v", c.File)
	}
	got, err := os.ReadFile(filepath.Join(h.cwdOf("s1"), ".skein-attachments", "notes.txt"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("file on disk: %d bytes, %v; want the %d uploaded", len(got), err, len(data))
	}
	if left := incoming(t, h.cwdOf("s1")); len(left) != 0 {
		t.Errorf("temporary files left after commit: %v", left)
	}
	_, err = fileCall[events.FileWriteResponse](t, h, "s1", &events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: begun.TransferID, Offset: int64(len(data)), Data: []byte("x")}})
	wantCode(t, "write after commit", err, events.CodeFileNotFound, "")

	root, err := fileCall[events.FileListResponse](t, h, "s1", &events.RunnerFileRequest{List: &events.FileListRequest{}})
	if err != nil || len(root.Files) != 1 || root.Files[0].Name != events.AttachmentDir || !root.Files[0].Directory {
		t.Errorf("list of the working directory = %+v, %v", root, err)
	}
	list, err = fileCall[events.FileListResponse](t, h, "s1", &events.RunnerFileRequest{List: &events.FileListRequest{Path: events.AttachmentDir}})
	if err != nil || len(list.Files) != 1 || list.Files[0].Path != c.File.Path {
		t.Errorf("list of %s = %+v, %v; want the upload alone (no %s)", events.AttachmentDir, list, err, events.AttachmentIncoming)
	}
	var read []byte
	for off := int64(0); ; {
		r, err := fileCall[events.FileReadResponse](t, h, "s1", &events.RunnerFileRequest{Read: &events.FileReadRequest{Path: c.File.Path, Offset: off, Length: 3000}})
		if err != nil {
			t.Fatal(err)
		}
		read = append(read, r.Data...)
		off += int64(len(r.Data))
		if r.EOF {
			break
		}
		if len(r.Data) != 3000 {
			t.Fatalf("read at %d gave %d bytes, not EOF", r.Offset, len(r.Data))
		}
	}
	if !bytes.Equal(read, data) {
		t.Errorf("read back %d bytes, not what was uploaded", len(read))
	}
}

// TestUploadOffsetsExact: a chunk anywhere but the next offset is
// refused, and the file is what the accepted chunks wrote.
func TestUploadOffsetsExact(t *testing.T) {
	h := start(t)
	begun, err := fileCall[events.FileTransferResponse](t, h, "s1", &events.RunnerFileRequest{Begin: &events.FileBeginRequest{Name: "o.bin", Size: 6}})
	if err != nil {
		t.Fatal(err)
	}
	write := func(off int64, data string) error {
		_, err := fileCall[events.FileWriteResponse](t, h, "s1", &events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: begun.TransferID, Offset: off, Data: []byte(data)}})
		return err
	}
	wantCode(t, "first chunk at 1", write(1, "bc"), events.CodeInvalidRequest, "")
	if err := write(0, "abc"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "the same chunk again", write(0, "abc"), events.CodeInvalidRequest, "")
	wantCode(t, "a chunk past the next offset", write(4, "ef"), events.CodeInvalidRequest, "")
	wantCode(t, "a chunk past the declared size", write(3, "defg"), events.CodePayloadTooLarge, "")
	if err := write(3, "def"); err != nil {
		t.Fatal(err)
	}
	f, err := fileCall[events.FileCommitResponse](t, h, "s1", &events.RunnerFileRequest{Commit: &events.FileCommitRequest{TransferID: begun.TransferID}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(h.cwdOf("s1"), filepath.FromSlash(f.File.Path))); string(got) != "abcdef" {
		t.Errorf("file = %q, want abcdef", got)
	}
}

// TestUploadCap: a file over the cap is refused at its begin, and a
// client that sends more than it declared is refused at the chunk that
// passes it; an abandoned transfer is removed after the TTL. Nothing is
// left behind either way.
func TestUploadCap(t *testing.T) {
	h := startWith(t, adapterrunner.Config{FileMaxBytes: 1000, FileTransferTTL: 300 * time.Millisecond})
	cwd := h.cwdOf("s1")
	_, err := fileCall[events.FileTransferResponse](t, h, "s1", &events.RunnerFileRequest{Begin: &events.FileBeginRequest{Name: "big.bin", Size: 1001}})
	wantCode(t, "begin over the cap", err, events.CodePayloadTooLarge, "")
	if _, err := os.Stat(cwd); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused begin made the working directory: %v", err)
	}

	begun, err := fileCall[events.FileTransferResponse](t, h, "s1", &events.RunnerFileRequest{Begin: &events.FileBeginRequest{Name: "big.bin", Size: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	if begun.MaxBytes != 1000 {
		t.Errorf("maxBytes = %d, want 1000", begun.MaxBytes)
	}
	off := int64(0)
	for i := range 10 {
		w, err := fileCall[events.FileWriteResponse](t, h, "s1", &events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: begun.TransferID, Offset: off, Data: bytes.Repeat([]byte{byte(i)}, 100)}})
		if err != nil {
			t.Fatal(err)
		}
		off = w.Offset
	}
	_, err = fileCall[events.FileWriteResponse](t, h, "s1", &events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: begun.TransferID, Offset: off, Data: []byte("x")}})
	wantCode(t, "a byte past the cap", err, events.CodePayloadTooLarge, "")
	if st, err := os.Stat(filepath.Join(cwd, events.AttachmentDir, events.AttachmentIncoming, strings.SplitN(begun.TransferID, "~", 2)[1]+".part")); err != nil || st.Size() != 1000 {
		t.Errorf("temporary file: %v, %v; want 1000 bytes", st, err)
	}

	// Abandoned: the sweep removes it, and the transfer is gone.
	testutil.Eventually(t, "the abandoned upload to be removed", func() bool {
		return len(incoming(t, cwd)) == 0 && h.runner.Uploads() == 0
	})
	_, err = fileCall[events.FileCommitResponse](t, h, "s1", &events.RunnerFileRequest{Commit: &events.FileCommitRequest{TransferID: begun.TransferID}})
	wantCode(t, "commit of an abandoned upload", err, events.CodeFileNotFound, "")
	if entries, _ := os.ReadDir(filepath.Join(cwd, events.AttachmentDir)); len(entries) != 1 {
		t.Errorf("%s holds %v, want only %s", events.AttachmentDir, entries, events.AttachmentIncoming)
	}
}

// TestUploadRaceSameName: uploads of one name committed at once land
// under distinct names, each whole, and the file already there keeps its
// bytes.
func TestUploadRaceSameName(t *testing.T) {
	h := start(t)
	dir := filepath.Join(h.cwdOf("s1"), events.AttachmentDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "same.txt"), []byte("original"), 0o600); err != nil {
		t.Fatal(err)
	}
	const rounds, racers = 10, 2
	seen := map[string]bool{"same.txt": true}
	for round := range rounds {
		var wg sync.WaitGroup
		files := make([]*events.FileInfo, racers)
		errs := make([]error, racers)
		contents := make([][]byte, racers)
		for i := range racers {
			contents[i] = fmt.Appendf(nil, "round %d racer %d", round, i)
			wg.Go(func() { files[i], errs[i] = upload(t, h, "s1", "same.txt", contents[i], 4) })
		}
		wg.Wait()
		for i := range racers {
			if errs[i] != nil {
				t.Fatalf("round %d racer %d: %v", round, i, errs[i])
			}
			if seen[files[i].Name] {
				t.Fatalf("round %d racer %d landed on %q, a name already taken", round, i, files[i].Name)
			}
			seen[files[i].Name] = true
			if got, _ := os.ReadFile(filepath.Join(dir, files[i].Name)); !bytes.Equal(got, contents[i]) {
				t.Errorf("%s = %q, want %q", files[i].Name, got, contents[i])
			}
		}
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "same.txt")); string(got) != "original" {
		t.Errorf("same.txt = %q: overwritten", got)
	}
	if len(seen) != 1+rounds*racers {
		t.Errorf("%d names, want %d", len(seen), 1+rounds*racers)
	}
}

// TestFilePathEscapes: "..", absolute paths, symbolic links (out of the
// directory or within it) and the uploads in progress are refused.
func TestFilePathEscapes(t *testing.T) {
	h := start(t)
	cwd := h.cwdOf("s1")
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(cwd, "sub"), 0o700))
	must(os.WriteFile(filepath.Join(cwd, "sub", "ok.txt"), []byte("ok"), 0o600))
	must(os.Symlink(filepath.Join(outside, "secret"), filepath.Join(cwd, "out-file")))
	must(os.Symlink(outside, filepath.Join(cwd, "out-dir")))
	must(os.Symlink("sub/ok.txt", filepath.Join(cwd, "in-file")))
	must(os.Symlink("sub", filepath.Join(cwd, "in-dir")))
	if _, err := upload(t, h, "s1", "up.txt", []byte("up"), 2); err != nil {
		t.Fatal(err)
	}
	begun, err := fileCall[events.FileTransferResponse](t, h, "s1", &events.RunnerFileRequest{Begin: &events.FileBeginRequest{Name: "p.txt", Size: 1}})
	must(err)
	partial := events.AttachmentDir + "/" + events.AttachmentIncoming + "/" + strings.SplitN(begun.TransferID, "~", 2)[1] + ".part"

	read := func(p string) error {
		_, err := fileCall[events.FileReadResponse](t, h, "s1", &events.RunnerFileRequest{Read: &events.FileReadRequest{Path: p}})
		return err
	}
	list := func(p string) error {
		_, err := fileCall[events.FileListResponse](t, h, "s1", &events.RunnerFileRequest{List: &events.FileListRequest{Path: p}})
		return err
	}
	if err := read("sub/ok.txt"); err != nil {
		t.Errorf("read sub/ok.txt: %v", err)
	}
	for _, p := range []string{"../s2/x", "sub/../../x", "..", "/etc/passwd", filepath.Join(outside, "secret"), "out-file", "out-dir/secret", "in-file", "in-dir/ok.txt"} {
		wantCode(t, "read "+p, read(p), events.CodeInvalidRequest, "")
	}
	for _, p := range []string{"..", "/", "out-dir", "in-dir"} {
		wantCode(t, "list "+p, list(p), events.CodeInvalidRequest, "")
	}
	wantCode(t, "read an upload in progress", read(partial), events.CodeFileNotFound, "")
	wantCode(t, "list the uploads in progress", list(events.AttachmentDir+"/"+events.AttachmentIncoming), events.CodeFileNotFound, "")
	wantCode(t, "read a missing file", read("nope"), events.CodeFileNotFound, "")
	wantCode(t, "read a directory", read("sub"), events.CodeInvalidRequest, "")

	got, err := fileCall[events.FileListResponse](t, h, "s1", &events.RunnerFileRequest{List: &events.FileListRequest{}})
	must(err)
	var names []string
	for _, f := range got.Files {
		names = append(names, f.Name)
	}
	if want := []string{events.AttachmentDir, "sub"}; !slices.Equal(names, want) {
		t.Errorf("list = %v, want %v (links left out)", names, want)
	}
	// The working directory itself replaced by a link out of the
	// workspace: the runner's confinement refuses it.
	must(os.Symlink(outside, h.cwdOf("s3")))
	_, err = fileCall[events.FileListResponse](t, h, "s3", &events.RunnerFileRequest{List: &events.FileListRequest{}})
	wantCode(t, "list a session whose cwd is a link out", err, events.CodeInvalidRequest, "")
}

// TestPromptAttachment: a prompt's skein-attachment: link reaches the
// agent as an embedded resource when it is small (the test agent takes
// embedded context), else as a file:// link with its size.
func TestPromptAttachment(t *testing.T) {
	h := startWith(t, adapterrunner.Config{FileEmbedMaxBytes: 16})
	h.create(t, "s1", "p1", "test")
	small, err := upload(t, h, "s1", "small.txt", []byte("tiny text"), 100)
	if err != nil {
		t.Fatal(err)
	}
	large, err := upload(t, h, "s1", "large.txt", []byte(strings.Repeat("x", 40)), 100)
	if err != nil {
		t.Fatal(err)
	}
	content, _ := json.Marshal([]map[string]any{
		{"type": "text", "text": "blocks"},
		{"type": "resource_link", "uri": events.AttachmentScheme + small.Name, "name": small.Name},
		{"type": "resource_link", "uri": events.AttachmentScheme + large.Name, "name": "my title", "description": "kept"},
		{"type": "resource_link", "uri": events.AttachmentScheme + "gone.txt", "name": "gone.txt"},
	})
	if _, err := rpc.Call[events.RunnerAck](t.Context(), h.nc, events.RunnerSubject("r1", events.RunnerPrompt),
		&events.RunnerPromptRequest{TurnID: "t1", Prompt: content}, header("s1", "p1")); err != nil {
		t.Fatal(err)
	}
	_, before := until[*events.AdapterPromptResult](t, h)
	report := strings.Join(updateTexts(before), "")
	cwd := h.cwdOf("s1")
	abs, err := filepath.EvalSymlinks(cwd)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []map[string]any
	for line := range strings.Lines(report) {
		var b map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(line), "block ")), &b); err != nil {
			t.Fatalf("report line %q: %v", line, err)
		}
		blocks = append(blocks, b)
	}
	if len(blocks) != 3 {
		t.Fatalf("agent got %d blocks besides text, want 3: %s", len(blocks), report)
	}
	res, _ := blocks[0]["resource"].(map[string]any)
	if blocks[0]["type"] != "resource" || res["text"] != "tiny text" || res["uri"] != "file://"+abs+"/.skein-attachments/small.txt" {
		t.Errorf("small attachment reached the agent as %v", blocks[0])
	}
	if blocks[1]["type"] != "resource_link" || blocks[1]["uri"] != "file://"+abs+"/.skein-attachments/large.txt" ||
		blocks[1]["size"] != float64(40) || blocks[1]["name"] != "my title" || blocks[1]["description"] != "kept" {
		t.Errorf("large attachment reached the agent as %v", blocks[1])
	}
	if blocks[2]["type"] != "resource_link" || blocks[2]["uri"] != "file://"+abs+"/.skein-attachments/gone.txt" || blocks[2]["size"] != nil {
		t.Errorf("missing attachment reached the agent as %v", blocks[2])
	}
}

// FuzzUploadOffsets writes chunks at fuzzed offsets and sizes: a chunk is
// accepted exactly when it starts at the next offset and stays within the
// declared size, and the committed file is the accepted chunks in order.
func FuzzUploadOffsets(f *testing.F) {
	f.Add(int64(10), []byte{0, 4, 4, 6}, []byte{4, 2, 6, 0})
	f.Add(int64(0), []byte{0}, []byte{0})
	f.Add(int64(5), []byte{1, 0, 5}, []byte{5, 5, 0})
	f.Add(int64(3), []byte{0, 255, 3}, []byte{200, 3, 1})
	f.Fuzz(func(t *testing.T, size int64, offsets, lengths []byte) {
		h, sid := start(t), "f1"
		size = max(0, size%512)
		begun, err := fileCall[events.FileTransferResponse](t, h, sid, &events.RunnerFileRequest{Begin: &events.FileBeginRequest{Name: "f.bin", Size: size}})
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		for i := range min(len(offsets), len(lengths)) {
			off, l := int64(offsets[i]), int(lengths[i])
			data := bytes.Repeat([]byte{byte(i + 1)}, l)
			_, err := fileCall[events.FileWriteResponse](t, h, sid, &events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: begun.TransferID, Offset: off, Data: data}})
			ok := off == int64(len(want)) && off+int64(l) <= size
			if ok != (err == nil) {
				t.Fatalf("chunk %d at %d of %d bytes (have %d of %d): %v", i, off, l, len(want), size, err)
			}
			if ok {
				want = append(want, data...)
			}
		}
		c, err := fileCall[events.FileCommitResponse](t, h, sid, &events.RunnerFileRequest{Commit: &events.FileCommitRequest{TransferID: begun.TransferID}})
		if int64(len(want)) != size {
			wantCode(t, "commit of an incomplete upload", err, events.CodeInvalidRequest, "")
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(filepath.Join(h.cwdOf(sid), filepath.FromSlash(c.File.Path))); !bytes.Equal(got, want) {
			t.Fatalf("file = %v, want %v", got, want)
		}
	})
}

// TestUploadCancel: a cancelled upload's bytes go at once, its name is
// never taken, and the transfer is over for every later op. Another
// session cannot cancel it.
func TestUploadCancel(t *testing.T) {
	h := start(t)
	cancelOf := func(sid, id string) error {
		_, err := fileCall[events.FileCancelResponse](t, h, sid, &events.RunnerFileRequest{Cancel: &events.FileCancelRequest{TransferID: id}})
		return err
	}
	begun, err := fileCall[events.FileTransferResponse](t, h, "s1", &events.RunnerFileRequest{Begin: &events.FileBeginRequest{Name: "half.bin", Size: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fileCall[events.FileWriteResponse](t, h, "s1", &events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: begun.TransferID, Data: []byte("01234")}}); err != nil {
		t.Fatal(err)
	}
	if left := incoming(t, h.cwdOf("s1")); len(left) != 1 {
		t.Fatalf("uploads in progress on disk = %v, want one", left)
	}
	wantCode(t, "cancel from another session", cancelOf("s2", begun.TransferID), events.CodeFileNotFound, "")
	if left := incoming(t, h.cwdOf("s1")); len(left) != 1 {
		t.Fatalf("another session's cancel removed the upload: %v", left)
	}
	if err := cancelOf("s1", begun.TransferID); err != nil {
		t.Fatalf("cancel = %v", err)
	}
	if left := incoming(t, h.cwdOf("s1")); len(left) != 0 {
		t.Errorf("temporary files left after cancel: %v", left)
	}
	_, err = fileCall[events.FileWriteResponse](t, h, "s1", &events.RunnerFileRequest{Write: &events.FileWriteRequest{TransferID: begun.TransferID, Offset: 5, Data: []byte("56789")}})
	wantCode(t, "write after cancel", err, events.CodeFileNotFound, "")
	_, err = fileCall[events.FileCommitResponse](t, h, "s1", &events.RunnerFileRequest{Commit: &events.FileCommitRequest{TransferID: begun.TransferID}})
	wantCode(t, "commit after cancel", err, events.CodeFileNotFound, "")
	wantCode(t, "cancel again", cancelOf("s1", begun.TransferID), events.CodeFileNotFound, "")
	if _, err := os.Lstat(filepath.Join(h.cwdOf("s1"), events.AttachmentDir, "half.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a cancelled upload's name exists: %v", err)
	}

	// A committed upload is not cancelled: the file stays.
	f, err := upload(t, h, "s1", "whole.txt", []byte("whole"), 5)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(h.cwdOf("s1"), filepath.FromSlash(f.Path))); err != nil || string(got) != "whole" {
		t.Fatalf("committed file = %q, %v", got, err)
	}
}
