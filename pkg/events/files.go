package events

import (
	"bytes"
	"encoding/json"
	"path"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Attachments: bounded file operations on a session's working directory
// (the edge-agent contract's file_* actions), which the session service
// forwards, one RunnerFile request each, to the runner whose file system
// holds it; nothing of a file enters the log. An upload is begun, written
// in chunks at exact offsets and committed, landing under AttachmentDir
// with a unique name; list and read reach files under the working
// directory through an os.Root (no "..", absolute path or symbolic link).

// Attachment limits and names. Each size is a default the services may
// lower or raise by configuration, except MaxFileChunk, which bounds one
// NATS message.
const (
	// AttachmentDir is where uploads land, relative to the working
	// directory.
	AttachmentDir = ".skein-attachments"
	// AttachmentIncoming holds the transfers not yet committed, inside
	// AttachmentDir: never listed, never read.
	AttachmentIncoming = ".incoming"
	// AttachmentScheme prefixes the URI of a prompt's resource_link that
	// names an uploaded file: "skein-attachment:<name>", name as the
	// commit answered it. Skein rewrites the block before the agent gets
	// it (a file:// resource_link, or an embedded resource).
	AttachmentScheme = "skein-attachment:"

	DefaultMaxFileBytes  = 20 << 20 // one uploaded file
	MaxFileChunk         = 1 << 20  // one chunk written or read
	MaxPromptAttachments = 8        // attachment references in one prompt
	DefaultEmbedMaxBytes = 64 << 10 // an attachment embedded in a prompt, at most
	MaxFileNameBytes     = 255      // an upload's name, as on most file systems
	MaxFilePathBytes     = 4096     // a listed or read path
	MaxListEntries       = 1000     // one listing; more is Truncated
	// chunkOverhead is room in a NATS message for what goes with a
	// chunk: the request's other fields and the headers.
	chunkOverhead = 64 << 10
	minFileChunk  = 4 << 10
)

// FileChunkSize returns the largest chunk a connection whose server takes
// messages of up to maxPayload bytes carries in one request: MaxFileChunk,
// less when the server's limit is lower (a test server's 1 MiB), so that a
// chunk and its envelope always fit.
func FileChunkSize(maxPayload int64) int64 {
	return max(min(MaxFileChunk, maxPayload-chunkOverhead), minFileChunk)
}

// FileInfo describes one file or directory. Path is relative to the
// working directory, slash-separated.
type FileInfo struct {
	Name      string `msgpack:"name" json:"name"`
	Path      string `msgpack:"path" json:"path"`
	Size      int64  `msgpack:"size" json:"size"`
	Directory bool   `msgpack:"directory,omitempty" json:"directory,omitempty"`
	MediaType string `msgpack:"mediaType,omitempty" json:"mediaType,omitempty"`
	// ModifiedAt is RFC 3339 with nanoseconds, UTC.
	ModifiedAt string `msgpack:"modifiedAt,omitempty" json:"modifiedAt,omitempty"`
}

// FileBeginRequest begins an upload of Size bytes named Name (a base name,
// CheckUploadName). An omitted session ID means main.
type FileBeginRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
	Name      string  `msgpack:"name"`
	Size      int64   `msgpack:"size"`
}

// FileTransferResponse answers OpFileBegin: the transfer to write to, the
// largest chunk each write may carry, and the largest file accepted.
type FileTransferResponse struct {
	TransferID string `msgpack:"transferId"`
	ChunkSize  int64  `msgpack:"chunkSize"`
	MaxBytes   int64  `msgpack:"maxBytes"`
}

// FileWriteRequest writes Data at Offset, which must be the transfer's
// next offset (what it has so far).
type FileWriteRequest struct {
	SessionID  *string `msgpack:"sessionId,omitempty"`
	TransferID string  `msgpack:"transferId"`
	Offset     int64   `msgpack:"offset"`
	Data       []byte  `msgpack:"data"`
}

// FileWriteResponse answers OpFileWrite: the transfer's next offset.
type FileWriteResponse struct {
	Offset int64 `msgpack:"offset"`
}

// FileCommitRequest commits a transfer that has all its bytes.
type FileCommitRequest struct {
	SessionID  *string `msgpack:"sessionId,omitempty"`
	TransferID string  `msgpack:"transferId"`
}

// FileCommitResponse answers OpFileCommit: the file as it landed. Its Name
// is what a prompt names it by (AttachmentScheme).
type FileCommitResponse struct {
	File FileInfo `msgpack:"file"`
}

// FileCancelRequest abandons a transfer before its commit: its bytes are
// removed at once, not after the TTL.
type FileCancelRequest struct {
	SessionID  *string `msgpack:"sessionId,omitempty"`
	TransferID string  `msgpack:"transferId"`
}

// FileCancelResponse answers OpFileCancel: the transfer is gone.
type FileCancelResponse struct{}

// FileListRequest lists the directory Path ("" or ".": the working
// directory itself).
type FileListRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
	Path      string  `msgpack:"path,omitempty"`
}

// FileListResponse answers OpFileList, entries sorted by name. Symbolic
// links are left out; Truncated says there were more than MaxListEntries.
type FileListResponse struct {
	Path      string     `msgpack:"path"`
	Files     []FileInfo `msgpack:"files"`
	Truncated bool       `msgpack:"truncated,omitempty"`
}

// FileReadRequest reads up to Length bytes (0: one chunk) of the file Path
// from Offset.
type FileReadRequest struct {
	SessionID *string `msgpack:"sessionId,omitempty"`
	Path      string  `msgpack:"path"`
	Offset    int64   `msgpack:"offset,omitempty"`
	Length    int64   `msgpack:"length,omitempty"`
}

// FileReadResponse answers OpFileRead: the file, and Data read at Offset;
// EOF says nothing follows it.
type FileReadResponse struct {
	File   FileInfo `msgpack:"file"`
	Offset int64    `msgpack:"offset"`
	Data   []byte   `msgpack:"data"`
	EOF    bool     `msgpack:"eof,omitempty"`
}

// RunnerFileRequest is a file op as the session service forwards it to a
// runner: the session's working directory as it was opened ("" for its
// default), which the runner confines again, and exactly one request.
type RunnerFileRequest struct {
	Cwd    string             `msgpack:"cwd,omitempty"`
	Begin  *FileBeginRequest  `msgpack:"begin,omitempty"`
	Write  *FileWriteRequest  `msgpack:"write,omitempty"`
	Commit *FileCommitRequest `msgpack:"commit,omitempty"`
	Cancel *FileCancelRequest `msgpack:"cancel,omitempty"`
	List   *FileListRequest   `msgpack:"list,omitempty"`
	Read   *FileReadRequest   `msgpack:"read,omitempty"`
}

// Validate checks a begin request: its name, and a size of 0 or more
// (the cap is the runner's to apply).
func (r *FileBeginRequest) Validate() (SessionID, error) {
	sid, err := OptionalSessionID(r.SessionID)
	if err != nil {
		return "", err
	}
	if err := CheckUploadName(r.Name); err != nil {
		return "", err
	}
	if r.Size < 0 {
		return "", Errorf(CodeInvalidRequest, "size must not be negative")
	}
	return sid, nil
}

// Validate checks a write request: a transfer ID, an offset of 0 or more,
// and at most MaxFileChunk bytes.
func (r *FileWriteRequest) Validate() (SessionID, error) {
	sid, err := OptionalSessionID(r.SessionID)
	if err != nil {
		return "", err
	}
	if _, err := TransferRunner(r.TransferID); err != nil {
		return "", err
	}
	if r.Offset < 0 {
		return "", Errorf(CodeInvalidRequest, "offset must not be negative")
	}
	if len(r.Data) > MaxFileChunk {
		return "", Errorf(CodePayloadTooLarge, "a chunk is %d bytes, more than %d", len(r.Data), MaxFileChunk)
	}
	return sid, nil
}

// Validate checks a commit request's transfer ID.
func (r *FileCommitRequest) Validate() (SessionID, error) {
	sid, err := OptionalSessionID(r.SessionID)
	if err != nil {
		return "", err
	}
	_, err = TransferRunner(r.TransferID)
	return sid, err
}

// Validate checks a cancel request's transfer ID.
func (r *FileCancelRequest) Validate() (SessionID, error) {
	sid, err := OptionalSessionID(r.SessionID)
	if err != nil {
		return "", err
	}
	_, err = TransferRunner(r.TransferID)
	return sid, err
}

// Validate checks a list request's path (CleanFilePath).
func (r *FileListRequest) Validate() (SessionID, error) {
	sid, err := OptionalSessionID(r.SessionID)
	if err != nil {
		return "", err
	}
	_, err = CleanFilePath(r.Path)
	return sid, err
}

// Validate checks a read request: a path naming a file, not the working
// directory, and an offset and length of 0 or more.
func (r *FileReadRequest) Validate() (SessionID, error) {
	sid, err := OptionalSessionID(r.SessionID)
	if err != nil {
		return "", err
	}
	p, err := CleanFilePath(r.Path)
	if err != nil {
		return "", err
	}
	if p == "." {
		return "", Errorf(CodeInvalidRequest, "path must name a file")
	}
	if r.Offset < 0 || r.Length < 0 {
		return "", Errorf(CodeInvalidRequest, "offset and length must not be negative")
	}
	return sid, nil
}

// transferRE is a transfer ID: "<runner ID>~<NUID>". The runner that
// holds a transfer names itself in its ID, so that every chunk reaches it
// whichever session service replica forwards it, and however the
// session's adapter moved meanwhile.
var transferRE = regexp.MustCompile(`^([A-Za-z0-9_-]{1,128})~[A-Za-z0-9]{1,64}$`)

// TransferID returns the ID of a transfer runner holds, token a NUID.
func TransferID(runner RunnerID, token string) string { return string(runner) + "~" + token }

// TransferRunner returns the runner a transfer ID names, or
// CodeInvalidRequest for anything that is not a transfer ID.
func TransferRunner(id string) (RunnerID, error) {
	m := transferRE.FindStringSubmatch(id)
	if m == nil {
		return "", Errorf(CodeInvalidRequest, "transferId %q is not a transfer ID", Truncate(id, 80))
	}
	return RunnerID(m[1]), nil
}

// CheckUploadName checks the name an upload asks for: a base name of 1 to
// MaxFileNameBytes bytes of valid UTF-8, without a slash, backslash,
// control character or character that hides or reorders text (HiddenRune),
// not beginning with a dot. The file lands under that name, or a variant
// of it when the name is taken.
func CheckUploadName(name string) error {
	switch {
	case name == "":
		return Errorf(CodeInvalidRequest, "name is required")
	case len(name) > MaxFileNameBytes:
		return Errorf(CodeInvalidRequest, "name must be at most %d bytes", MaxFileNameBytes)
	case !utf8.ValidString(name):
		return Errorf(CodeInvalidRequest, "name must be valid UTF-8")
	case strings.HasPrefix(name, "."):
		// Names beginning with a dot are hidden, and Skein's own
		// (AttachmentIncoming) among them.
		return Errorf(CodeInvalidRequest, "name must not begin with a dot")
	}
	for _, r := range name {
		if r == '/' || r == '\\' || unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return Errorf(CodeInvalidRequest, "name must be a file name, without %U", r)
		}
	}
	if r, ok := HiddenRune(name); ok {
		return Errorf(CodeInvalidRequest, "name must not contain characters that hide or reorder text (found %U)", r)
	}
	return nil
}

// CleanFilePath checks a path a client names under the working directory
// and returns it cleaned ("." for the directory itself): relative,
// slash-separated, valid UTF-8 without NUL or control characters, at most
// MaxFilePathBytes, and with no ".." element. The runner then opens it
// through an os.Root and refuses symbolic links on the way.
func CleanFilePath(p string) (string, error) {
	if p == "" {
		return ".", nil
	}
	if len(p) > MaxFilePathBytes {
		return "", Errorf(CodeInvalidRequest, "path must be at most %d bytes", MaxFilePathBytes)
	}
	if !utf8.ValidString(p) {
		return "", Errorf(CodeInvalidRequest, "path must be valid UTF-8")
	}
	for _, r := range p {
		if unicode.IsControl(r) || r == '\\' {
			return "", Errorf(CodeInvalidRequest, "path must not contain %U", r)
		}
	}
	if strings.HasPrefix(p, "/") {
		return "", Errorf(CodeInvalidRequest, "path must be relative to the working directory")
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", Errorf(CodeInvalidRequest, "path must not contain ..")
		}
	}
	return path.Clean(p), nil
}

// AttachmentRef is the upload a prompt's content block names: the name
// under AttachmentDir, or ok false when the block names none.
func AttachmentRef(block []byte) (name string, ok bool, err error) {
	if !bytes.Contains(block, []byte(AttachmentScheme)) {
		return "", false, nil // most blocks: not parsed again
	}
	var b struct {
		Type string `json:"type"`
		URI  string `json:"uri"`
	}
	if json.Unmarshal(block, &b) != nil || b.Type != "resource_link" || !strings.HasPrefix(b.URI, AttachmentScheme) {
		return "", false, nil
	}
	name = strings.TrimPrefix(b.URI, AttachmentScheme)
	if err := CheckUploadName(name); err != nil {
		return "", true, Errorf(CodeInvalidRequest, "attachment %q: %s", Truncate(name, 80), AsError(err).Message)
	}
	return name, true, nil
}

func (FileBeginRequest) VariantName() string     { return "FileBeginRequest" }
func (FileTransferResponse) VariantName() string { return "FileTransferResponse" }
func (FileWriteRequest) VariantName() string     { return "FileWriteRequest" }
func (FileWriteResponse) VariantName() string    { return "FileWriteResponse" }
func (FileCommitRequest) VariantName() string    { return "FileCommitRequest" }
func (FileCommitResponse) VariantName() string   { return "FileCommitResponse" }
func (FileCancelRequest) VariantName() string    { return "FileCancelRequest" }
func (FileCancelResponse) VariantName() string   { return "FileCancelResponse" }
func (FileListRequest) VariantName() string      { return "FileListRequest" }
func (FileListResponse) VariantName() string     { return "FileListResponse" }
func (FileReadRequest) VariantName() string      { return "FileReadRequest" }
func (FileReadResponse) VariantName() string     { return "FileReadResponse" }
func (RunnerFileRequest) VariantName() string    { return "RunnerFileRequest" }

func init() {
	register(func() Variant { return new(FileBeginRequest) })
	register(func() Variant { return new(FileTransferResponse) })
	register(func() Variant { return new(FileWriteRequest) })
	register(func() Variant { return new(FileWriteResponse) })
	register(func() Variant { return new(FileCommitRequest) })
	register(func() Variant { return new(FileCommitResponse) })
	register(func() Variant { return new(FileCancelRequest) })
	register(func() Variant { return new(FileCancelResponse) })
	register(func() Variant { return new(FileListRequest) })
	register(func() Variant { return new(FileListResponse) })
	register(func() Variant { return new(FileReadRequest) })
	register(func() Variant { return new(FileReadResponse) })
	register(func() Variant { return new(RunnerFileRequest) })
}
