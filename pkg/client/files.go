package client

import (
	"context"
	"io"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// Upload uploads size bytes read from r to the session's working
// directory as name, in the chunks the runner offers, and commits it. The
// file lands under .skein-attachments with name, or a variant of it when
// the name is taken (a file is never replaced); a prompt names it by the
// returned Name (events.AttachmentScheme). r must yield exactly size
// bytes: fewer is an error. An upload that fails after its begin, ctx
// ended included, is cancelled (CancelUpload), and nothing of it stays.
func (c *Client) Upload(ctx context.Context, sid, name string, size int64, r io.Reader) (_ *events.FileInfo, err error) {
	begun, err := rpc.Call[events.FileTransferResponse](ctx, c.nc, c.subject(events.OpFileBegin),
		&events.FileBeginRequest{SessionID: &sid, Name: name, Size: size}, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.nc.Opts.Timeout)
			defer cancel()
			_ = c.CancelUpload(cctx, sid, begun.TransferID) // best effort: the runner's TTL is the backstop
		}
	}()
	// Each chunk travels in one message of this connection too.
	chunk := min(begun.ChunkSize, events.FileChunkSize(c.nc.MaxPayload()))
	buf := make([]byte, min(chunk, max(size, 1)))
	for off := int64(0); off < size; {
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-off)])
		if err != nil {
			return nil, events.Errorf(events.CodeInvalidRequest, "read the file at %d of %d bytes: %v", off, size, err)
		}
		w, err := rpc.Call[events.FileWriteResponse](ctx, c.nc, c.subject(events.OpFileWrite),
			&events.FileWriteRequest{SessionID: &sid, TransferID: begun.TransferID, Offset: off, Data: buf[:n]}, nil)
		if err != nil {
			return nil, err
		}
		off = w.Offset
	}
	done, err := rpc.Call[events.FileCommitResponse](ctx, c.nc, c.subject(events.OpFileCommit),
		&events.FileCommitRequest{SessionID: &sid, TransferID: begun.TransferID}, nil)
	if err != nil {
		return nil, err
	}
	return &done.File, nil
}

// CancelUpload cancels the upload transferID before its commit: what it
// wrote is removed at once. An upload that is over (committed, cancelled,
// removed) is CodeFileNotFound.
func (c *Client) CancelUpload(ctx context.Context, sid, transferID string) error {
	_, err := rpc.Call[events.FileCancelResponse](ctx, c.nc, c.subject(events.OpFileCancel),
		&events.FileCancelRequest{SessionID: &sid, TransferID: transferID}, nil)
	return err
}

// Files lists the directory dir of the session's working directory (""
// for the directory itself): its entries sorted by name, symbolic links
// left out. No adapter starts.
func (c *Client) Files(ctx context.Context, sid, dir string) (*events.FileListResponse, error) {
	return rpc.Call[events.FileListResponse](ctx, c.nc, c.subject(events.OpFileList),
		&events.FileListRequest{SessionID: &sid, Path: dir}, nil)
}

// Download writes the regular file p of the session's working directory to
// w, a chunk at a time, and returns what the file is. A file that changes
// size while it is read is an error (CodeUnavailable): what w got is then
// incomplete.
func (c *Client) Download(ctx context.Context, sid, p string, w io.Writer) (*events.FileInfo, error) {
	chunk := events.FileChunkSize(c.nc.MaxPayload())
	var info *events.FileInfo
	for off := int64(0); ; {
		r, err := rpc.Call[events.FileReadResponse](ctx, c.nc, c.subject(events.OpFileRead),
			&events.FileReadRequest{SessionID: &sid, Path: p, Offset: off, Length: chunk}, nil)
		if err != nil {
			return nil, err
		}
		if info == nil {
			info = &r.File
		} else if r.File.Size != info.Size {
			return nil, events.Errorf(events.CodeUnavailable, "%s changed size while it was read (%d, then %d bytes)", p, info.Size, r.File.Size)
		}
		if _, err := w.Write(r.Data); err != nil {
			return nil, err
		}
		off += int64(len(r.Data))
		if r.EOF || off >= info.Size {
			return info, nil
		}
		if len(r.Data) == 0 {
			return nil, events.Errorf(events.CodeUnavailable, "%s ended at %d of %d bytes", p, off, info.Size)
		}
	}
}
