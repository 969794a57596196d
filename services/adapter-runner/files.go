package adapterrunner

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"mime"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nuid"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// The runner serves a session's file ops (events.RunnerFile) on its own
// file system: the session's working directory is where its adapter works,
// so the runner that hosts the adapter, or would host it, holds the files.
// Every path is opened through an os.Root of the working directory, which
// no "..", absolute path or symbolic link escapes; on top of that, a path
// through a symbolic link is refused outright, so that a listing or a read
// shows only what lies in the directory itself.
//
// An upload is written to a temporary file under
// .skein-attachments/.incoming, which no listing shows and no read
// reaches, and committed by a hard link to a free name in
// .skein-attachments: a link never replaces an existing name (EEXIST), so
// two commits of the same name land under two names and no file is ever
// overwritten. The temporary file is then removed.
//
// The agent controls what lies in its directory, and a FIFO blocks
// whoever opens it until its other end is opened. So every file opened
// here (a listed directory, a read, an upload's temporary file, the file a
// commit links) is opened O_NONBLOCK|O_NOFOLLOW through the os.Root, then
// fstat'ed: anything but a regular file, or a directory where a directory
// is meant, is refused at once, invalid_request, and never read or
// written. os.Root passes both flags to openat (and adds O_NOFOLLOW to
// every open itself), but resolves a symbolic link it meets in the last
// element within the root on its own: what was opened is therefore
// compared with the name's Lstat, which refuses a link (or a swap). The
// ops run in slots bounded in number and time (fileops.go).
//
// Uploads in progress are bounded per session, per principal (the
// request's Acp-Principal), per namespace and per runner, and a session's
// deletion (events.RunnerRemove, remove.go) ends its uploads and removes their
// partial files; an unload does not (an upload may outlive an adapter).

// Defaults of the runner's attachment settings (Config.Files*).
const (
	defaultTransferTTL   = time.Hour
	maxTransfersSession  = 8   // uploads in progress per session
	maxTransfersRunner   = 256 // uploads in progress on the runner (per principal and namespace: Config.Uploads*)
	maxNameVariants      = 100 // numbered names tried before a random one
	maxRandomNames       = 10  // random names tried then
	maxListScan          = 10 * events.MaxListEntries
	attachmentDirPerm    = 0o700
	attachmentFilePerm   = 0o600
	incomingSuffix       = ".part"
	attachmentIncomingAt = events.AttachmentDir + "/" + events.AttachmentIncoming
)

// Defaults of Config.UploadsPerPrincipal and Config.UploadsPerNamespace:
// a quarter and a half of the runner's uploads in progress.
const (
	DefaultUploadsPerPrincipal = maxTransfersRunner / 4
	DefaultUploadsPerNamespace = maxTransfersRunner / 2
)

// fileStore holds the uploads in progress.
type fileStore struct {
	maxBytes     int64
	ttl          time.Duration
	embedMax     int64
	perPrincipal int
	perNamespace int
	ops          *fileOps

	mu        sync.Mutex
	transfers map[string]*transfer // by token
}

func newFileStore(cfg Config, ops *fileOps) *fileStore {
	s := &fileStore{
		maxBytes:     cfg.FileMaxBytes,
		ttl:          cfg.FileTransferTTL,
		embedMax:     cfg.FileEmbedMaxBytes,
		perPrincipal: cfg.UploadsPerPrincipal,
		perNamespace: cfg.UploadsPerNamespace,
		ops:          ops,
		transfers:    map[string]*transfer{},
	}
	return s
}

// transfer is one upload in progress. mu orders its writes and its
// commit; offset is how many bytes it has.
type transfer struct {
	key       string // the session's events.SessionKey
	ns        events.Namespace
	principal string      // who began it ("": none named)
	root      *os.Root    // the working directory its begin held, until it ends
	owner     adapterUser // the session's adapters' user, whose the upload is (adapteruser.go)
	token     string
	name      string
	size      int64

	mu      sync.Mutex
	offset  int64
	written time.Time // when the transfer began or was last written to
	done    bool      // committed or expired: its temporary file is gone
	timer   *time.Timer
}

// tmp is the transfer's temporary file, relative to the working directory.
func (t *transfer) tmp() string {
	return attachmentIncomingAt + "/" + t.token + incomingSuffix
}

// handleFile serves RunnerFile: one file op of the session the headers
// name, in the working directory the session service sent, confined again
// here as an adapter's cwd is (the roots may have changed since the
// session was opened).
func (r *Runner) handleFile(ctx context.Context, _ events.Namespace, data []byte) (events.Variant, error) {
	ns, sid, err := sessionOf(ctx)
	if err != nil {
		return nil, err
	}
	owner, err := r.sandbox.userFor(ns)
	if err != nil {
		return nil, err
	}
	req, err := events.Decode[events.RunnerFileRequest](data)
	if err != nil {
		return nil, err
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = r.cfg.WorkspaceRoots.Default(ns, sid)
	}
	// The working directory, resolved once beneath the namespace's own
	// and held (workspace.Roots.Open): a list, a read and an upload's
	// begin work in an os.Root of the held directory, never in what the
	// cwd's name leads to by then. An upload may come before the
	// session's first adapter made the directory: it is made then, as
	// confine makes it. The transfer keeps the root its begin opened, so
	// an upload's later requests need none.
	open := func(create bool) (*os.Root, error) {
		held, err := owner.openGiving(cwd, func() (*workspace.Dir, error) { // what it makes is the adapters' user's
			return r.cfg.WorkspaceRoots.Open(ns, r.cfg.WorkspaceGrants, "cwd", cwd, create)
		})
		if err != nil {
			if _, cerr := r.cfg.WorkspaceRoots.Check(ns, r.cfg.WorkspaceGrants, "cwd", cwd); cerr == nil && !create {
				// Confined by name, not there to open (yet, or
				// at this instant): as a missing directory.
				return nil, fsError("open the working directory", ".", fs.ErrNotExist)
			}
			return nil, err
		}
		defer held.Close()
		root, err := held.Root()
		if err != nil {
			return nil, fsError("open the working directory", ".", err)
		}
		return root, nil
	}
	key := events.SessionKey(ns, sid)
	return runFileOp(ctx, r.files.ops, key, func() (events.Variant, error) {
		return r.fileOp(ctx, ns, sid, owner, open, req)
	})
}

// fileOp runs the one op req names, in its slot (runFileOp), in the
// session's working directory, which open opens (create: made if missing,
// and given to owner, the session's adapters' user, as an upload is).
func (r *Runner) fileOp(ctx context.Context, ns events.Namespace, sid events.SessionID, owner adapterUser, open func(create bool) (*os.Root, error), req *events.RunnerFileRequest) (events.Variant, error) {
	key := events.SessionKey(ns, sid)
	switch {
	case req.Begin != nil:
		if _, err := req.Begin.Validate(); err != nil {
			return nil, err
		}
		if req.Begin.Size > r.files.maxBytes { // before anything is made
			return nil, events.Errorf(events.CodePayloadTooLarge, "a file may be at most %d bytes, not %d", r.files.maxBytes, req.Begin.Size)
		}
		root, err := open(true)
		if err != nil {
			return nil, err
		}
		by := uploader{key: key, ns: ns, principal: rpc.RequestHeaders(ctx).Get(events.HeaderPrincipal)}
		return r.files.begin(by, root, owner, req.Begin, events.TransferID(r.ID(), ""), events.FileChunkSize(r.nc.MaxPayload()))
	case req.Write != nil:
		if _, err := req.Write.Validate(); err != nil {
			return nil, err
		}
		return r.files.write(key, req.Write, events.FileChunkSize(r.nc.MaxPayload()))
	case req.Commit != nil:
		if _, err := req.Commit.Validate(); err != nil {
			return nil, err
		}
		return r.files.commit(key, req.Commit)
	case req.Cancel != nil:
		if _, err := req.Cancel.Validate(); err != nil {
			return nil, err
		}
		return r.files.cancel(key, req.Cancel)
	case req.List != nil:
		if _, err := req.List.Validate(); err != nil {
			return nil, err
		}
		root, err := open(false)
		if err != nil {
			return nil, err
		}
		defer root.Close()
		return r.files.listFiles(root, req.List.Path)
	case req.Read != nil:
		if _, err := req.Read.Validate(); err != nil {
			return nil, err
		}
		root, err := open(false)
		if err != nil {
			return nil, err
		}
		defer root.Close()
		return r.files.readFile(root, req.Read, events.FileChunkSize(r.nc.MaxPayload()))
	}
	return nil, events.Errorf(events.CodeInvalidRequest, "file request names no operation")
}

// uploader is who begins an upload: the session (its
// events.SessionKey), its namespace, and the principal the request names.
type uploader struct {
	key       string
	ns        events.Namespace
	principal string
}

// begin starts an upload: its temporary file is created empty, and the
// transfer expires after the store's TTL without a write. prefix is the
// transfer ID without its token (the runner's ID and "~").
func (s *fileStore) begin(by uploader, root *os.Root, owner adapterUser, req *events.FileBeginRequest, prefix string, chunk int64) (*events.FileTransferResponse, error) {
	if req.Size > s.maxBytes {
		_ = root.Close()
		return nil, events.Errorf(events.CodePayloadTooLarge, "a file may be at most %d bytes, not %d", s.maxBytes, req.Size)
	}
	t := &transfer{key: by.key, ns: by.ns, principal: by.principal, root: root, owner: owner, token: nuid.Next(), name: req.Name, size: req.Size}
	s.mu.Lock()
	if err := s.slotLocked(by); err != nil {
		s.mu.Unlock()
		_ = root.Close()
		return nil, err
	}
	s.transfers[t.token] = t
	s.mu.Unlock()

	if err := s.create(t); err != nil {
		s.drop(t)
		_ = root.Close()
		return nil, err
	}
	t.mu.Lock()
	t.written = time.Now()
	t.timer = time.AfterFunc(s.ttl, func() { s.expire(t) })
	t.mu.Unlock()
	return &events.FileTransferResponse{TransferID: prefix + t.token, ChunkSize: chunk, MaxBytes: s.maxBytes}, nil
}

// slotLocked refuses an upload that by may not begin now (s.mu held):
// its session, its principal, its namespace or the runner holds as many
// uploads in progress as it may. A request that names no principal
// (authentication off) is bounded by the others only.
func (s *fileStore) slotLocked(by uploader) error {
	var session, principal, namespace int
	for _, o := range s.transfers {
		if o.key == by.key {
			session++
		}
		if by.principal != "" && o.principal == by.principal {
			principal++
		}
		if o.ns == by.ns {
			namespace++
		}
	}
	refuse := func(cause, who string, n int, flag string) error {
		s.ops.refused(cause)
		return events.Errorf(events.CodeRateLimited, "too many uploads in progress: %s holds %d, the most it may%s; commit or cancel one, or wait for the abandoned ones to expire", who, n, flag)
	}
	switch {
	case session >= maxTransfersSession:
		return refuse(refusedUploadsSession, "the session", maxTransfersSession, "")
	case by.principal != "" && principal >= s.perPrincipal:
		return refuse(refusedUploadsPrincipal, "principal "+strconv.Quote(by.principal), s.perPrincipal, " (adapter-runner.uploads-per-principal)")
	case namespace >= s.perNamespace:
		return refuse(refusedUploadsNamespace, "namespace "+string(by.ns), s.perNamespace, " (adapter-runner.uploads-per-namespace)")
	case len(s.transfers) >= maxTransfersRunner:
		return refuse(refusedUploadsRunner, "the runner", maxTransfersRunner, "")
	}
	return nil
}

// create makes .skein-attachments/.incoming and the transfer's empty
// temporary file, and removes what earlier transfers of this working
// directory left there past their TTL (a runner that stopped before their
// expiry).
func (s *fileStore) create(t *transfer) error {
	root := t.root
	if err := noSymlinks(root, attachmentIncomingAt, true); err != nil {
		return err
	}
	if err := root.MkdirAll(attachmentIncomingAt, attachmentDirPerm); err != nil {
		return fsError("create", attachmentIncomingAt, err)
	}
	if err := noSymlinks(root, attachmentIncomingAt, false); err != nil {
		return err
	}
	f, err := root.OpenFile(t.tmp(), os.O_CREATE|os.O_EXCL|os.O_WRONLY|openFlags, attachmentFilePerm)
	if err != nil {
		return fsError("create", t.tmp(), err)
	}
	// The agent reads (and may remove) what is uploaded for it.
	if err := t.owner.ownIn(root, events.AttachmentDir, attachmentIncomingAt, t.tmp()); err != nil {
		_ = f.Close()
		return fsError("create", t.tmp(), err)
	}
	if err := f.Close(); err != nil {
		return fsError("create", t.tmp(), err)
	}
	s.sweepStale(root)
	return nil
}

// sweepStale removes the temporary files in root's incoming directory
// that no transfer of this runner holds and that were not written for
// longer than the TTL.
func (s *fileStore) sweepStale(root *os.Root) {
	d, _, err := s.open(root, attachmentIncomingAt, os.O_RDONLY, true, "list")
	if err != nil {
		return
	}
	defer d.Close()
	entries, _ := d.ReadDir(maxListScan)
	now := time.Now()
	for _, e := range entries {
		token, ok := strings.CutSuffix(e.Name(), incomingSuffix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		s.mu.Lock()
		_, live := s.transfers[token]
		s.mu.Unlock()
		if info, err := e.Info(); err == nil && !live && now.Sub(info.ModTime()) > s.ttl {
			_ = root.Remove(attachmentIncomingAt + "/" + e.Name())
		}
	}
}

// lookup returns the transfer token of the session key names; another
// session's transfer is as unknown as a missing one.
func (s *fileStore) lookup(key, transferID string) (*transfer, error) {
	_, token, _ := strings.Cut(transferID, "~")
	s.mu.Lock()
	t := s.transfers[token]
	s.mu.Unlock()
	if t == nil || t.key != key {
		return nil, events.Errorf(events.CodeFileNotFound, "no upload %s in progress (committed, cancelled, or abandoned and removed)", events.Truncate(transferID, 80))
	}
	return t, nil
}

// write writes one chunk at exactly the transfer's next offset.
func (s *fileStore) write(key string, req *events.FileWriteRequest, chunk int64) (*events.FileWriteResponse, error) {
	t, err := s.lookup(key, req.TransferID)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch n := int64(len(req.Data)); {
	case t.done:
		return nil, events.Errorf(events.CodeFileNotFound, "upload %s is over", req.TransferID)
	case req.Offset != t.offset:
		return nil, events.Errorf(events.CodeInvalidRequest, "a chunk at offset %d, but upload %s is at offset %d", req.Offset, req.TransferID, t.offset)
	case n > chunk:
		return nil, events.Errorf(events.CodePayloadTooLarge, "a chunk is %d bytes, more than %d", n, chunk)
	case t.offset+n > t.size:
		return nil, events.Errorf(events.CodePayloadTooLarge, "a chunk of %d bytes at offset %d passes the declared size %d", n, req.Offset, t.size)
	}
	if err := s.writeAt(t, req.Data, req.Offset); err != nil {
		// What is on disk no longer matches the offset: the transfer
		// cannot go on, and its file goes.
		s.endLocked(t)
		return nil, err
	}
	t.offset += int64(len(req.Data))
	t.written = time.Now()
	t.timer.Reset(s.ttl)
	return &events.FileWriteResponse{Offset: t.offset}, nil
}

// writeAt writes data at off of t's temporary file, which must be the
// regular file it was (the agent may have put a FIFO in its place).
func (s *fileStore) writeAt(t *transfer, data []byte, off int64) error {
	f, _, err := s.open(t.root, t.tmp(), os.O_WRONLY, false, "write")
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fsError("write", t.tmp(), err)
	}
	return nil
}

// commit gives a complete transfer's file its name: the one asked for, or
// the first free variant of it (name-2.ext, name-3.ext, ..., then a random
// one), by a hard link, which never replaces a name that exists.
func (s *fileStore) commit(key string, req *events.FileCommitRequest) (*events.FileCommitResponse, error) {
	t, err := s.lookup(key, req.TransferID)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil, events.Errorf(events.CodeFileNotFound, "upload %s is over", req.TransferID)
	}
	if t.offset != t.size {
		return nil, events.Errorf(events.CodeInvalidRequest, "upload %s has %d of its %d bytes", req.TransferID, t.offset, t.size)
	}
	root := t.root
	if err := noSymlinks(root, attachmentIncomingAt, false); err != nil {
		return nil, err
	}
	// What is linked must be the regular file written: a FIFO or a
	// device put in its place is refused, and so is a swap between this
	// check and the link (the name linked is then removed again).
	f, tmpInfo, err := s.open(root, t.tmp(), os.O_RDONLY, false, "commit")
	if err != nil {
		return nil, err
	}
	f.Close()
	for i := 1; i <= maxNameVariants+maxRandomNames; i++ {
		name := nameVariant(t.name, i)
		target := events.AttachmentDir + "/" + name
		err := root.Link(t.tmp(), target)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fsError("commit", target, err)
		}
		info, err := root.Lstat(target) // before endLocked closes root
		if err == nil && !os.SameFile(info, tmpInfo) {
			_ = root.Remove(target)
			err = events.Errorf(events.CodeInvalidRequest, "upload %s changed while it was committed", req.TransferID)
		}
		s.endLocked(t) // removes the temporary name; the file stays under target
		if err != nil {
			return nil, fsError("commit", target, err)
		}
		return &events.FileCommitResponse{File: fileInfo(target, info)}, nil
	}
	return nil, events.Errorf(events.CodeUnavailable, "no free name for %q in %s", t.name, events.AttachmentDir)
}

// cancel ends a transfer before its commit: it leaves the store and its
// temporary file is removed at once. A transfer that is over (committed,
// cancelled, expired) is file_not_found, as for a write.
func (s *fileStore) cancel(key string, req *events.FileCancelRequest) (*events.FileCancelResponse, error) {
	t, err := s.lookup(key, req.TransferID)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil, events.Errorf(events.CodeFileNotFound, "upload %s is over", req.TransferID)
	}
	s.endLocked(t)
	return &events.FileCancelResponse{}, nil
}

// nameVariant returns the i-th name tried for an upload named name: name
// itself, then name with "-i" before its extension, and past
// maxNameVariants one with a random part. Each fits MaxFileNameBytes,
// the stem shortened on a rune boundary when it must be.
func nameVariant(name string, i int) string {
	if i == 1 {
		return name
	}
	ext := path.Ext(name)
	if ext == name || len(ext) > 32 {
		ext = ""
	}
	stem := strings.TrimSuffix(name, ext)
	suffix := "-" + strconv.Itoa(i)
	if i > maxNameVariants {
		suffix = "-" + nuid.Next()
	}
	for len(stem)+len(suffix)+len(ext) > events.MaxFileNameBytes {
		_, size := utf8.DecodeLastRuneInString(stem)
		stem = stem[:len(stem)-size]
	}
	return stem + suffix + ext
}

// expire ends a transfer nobody wrote to for the TTL: its file goes. A
// timer that fired while a write held the transfer finds it written
// since, and leaves it to the timer that write set again.
func (s *fileStore) expire(t *transfer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if time.Since(t.written) < s.ttl {
		return
	}
	s.endLocked(t)
}

// endLocked ends t (t.mu held): it leaves the store, its timer stops, and
// its temporary file is removed. Ending an ended transfer does nothing.
func (s *fileStore) endLocked(t *transfer) {
	if t.done {
		return
	}
	t.done = true
	if t.timer != nil {
		t.timer.Stop()
	}
	s.drop(t)
	_ = t.root.Remove(t.tmp())
	_ = t.root.Close()
}

func (s *fileStore) drop(t *transfer) {
	s.mu.Lock()
	if s.transfers[t.token] == t {
		delete(s.transfers, t.token)
	}
	s.mu.Unlock()
}

// forget ends every upload of the session key names, as a cancel does:
// their slots are free and their temporary files removed. It returns how
// many there were.
func (s *fileStore) forget(key string) int {
	s.mu.Lock()
	var ts []*transfer
	for _, t := range s.transfers {
		if t.key == key {
			ts = append(ts, t)
		}
	}
	s.mu.Unlock()
	for _, t := range ts {
		t.mu.Lock()
		s.endLocked(t)
		t.mu.Unlock()
	}
	return len(ts)
}

// inProgress returns how many uploads are in progress.
func (s *fileStore) inProgress() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.transfers)
}

// listFiles lists directory p of the working directory root, sorted by
// name: symbolic links and the uploads in progress left out.
func (s *fileStore) listFiles(root *os.Root, p string) (*events.FileListResponse, error) {
	p, err := events.CleanFilePath(p)
	if err != nil {
		return nil, err
	}
	if err := reachable(root, p); err != nil {
		return nil, err
	}
	d, _, err := s.open(root, p, os.O_RDONLY, true, "list")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(maxListScan)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fsError("list", p, err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	resp := &events.FileListResponse{Path: p, Files: []events.FileInfo{}}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink != 0 || p == events.AttachmentDir && e.Name() == events.AttachmentIncoming {
			continue
		}
		if len(resp.Files) == events.MaxListEntries {
			resp.Truncated = true
			break
		}
		info, err := e.Info()
		if err != nil {
			continue // removed since it was read
		}
		resp.Files = append(resp.Files, fileInfo(path.Join(p, e.Name()), info))
	}
	if len(entries) == maxListScan {
		resp.Truncated = true
	}
	return resp, nil
}

// readFile reads up to one chunk of the regular file req.Path.
func (s *fileStore) readFile(root *os.Root, req *events.FileReadRequest, chunk int64) (*events.FileReadResponse, error) {
	p, err := events.CleanFilePath(req.Path)
	if err != nil {
		return nil, err
	}
	f, info, err := s.openRegular(root, p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n := chunk
	if req.Length > 0 {
		n = min(n, req.Length)
	}
	n = max(0, min(n, info.Size()-req.Offset))
	buf := make([]byte, n)
	got, err := f.ReadAt(buf, req.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fsError("read", p, err)
	}
	return &events.FileReadResponse{
		File: fileInfo(p, info), Offset: req.Offset, Data: buf[:got],
		EOF: req.Offset+int64(got) >= info.Size(),
	}, nil
}

// fileInfo describes the entry at p (relative, slash-separated).
func fileInfo(p string, info fs.FileInfo) events.FileInfo {
	fi := events.FileInfo{
		Name: info.Name(), Path: p, Directory: info.IsDir(),
		ModifiedAt: info.ModTime().UTC().Format(time.RFC3339Nano),
	}
	if !fi.Directory {
		fi.Size = info.Size()
		fi.MediaType = mediaType(p)
	}
	return fi
}

// mediaType guesses a file's media type from its extension: "" when
// unknown.
func mediaType(p string) string {
	if ext := path.Ext(p); ext != "" {
		return mime.TypeByExtension(ext)
	}
	return ""
}
