package gateway

import (
	"encoding/base64"
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strconv"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// The files of a session's working directory (events.OpFile*), served by
// the session service, which forwards each op to the runner holding the
// directory:
//
//	POST /v1/sessions/{id}/files/uploads                        {name, size} → {transferId, chunkSize, maxBytes}
//	PUT  /v1/sessions/{id}/files/uploads/{transferId}           {offset, data (base64)} → {offset}
//	POST /v1/sessions/{id}/files/uploads/{transferId}/commit    {} → {file}
//	GET  /v1/sessions/{id}/files?path=                          → {path, files, truncated?}
//	GET  /v1/sessions/{id}/files/content?path=                  → the file's bytes
//
// A chunk's body is JSON like every other body (base64 data), so that the
// edge's checks of a body hold for it too; it may carry at most one
// chunk, the smaller of events.MaxFileChunk and what this gateway's NATS
// connection carries in one message.

// chunkBodyLimit bounds a chunk's body: a whole chunk in base64 and room
// for the envelope, never more than a prompt's body.
func (g *Gateway) chunkBodyLimit() int64 {
	return min(g.cfg.MaxPromptBodyBytes, int64(base64.StdEncoding.EncodedLen(events.MaxFileChunk))+4<<10)
}

// chunkSize is the largest chunk this gateway forwards in one request.
func (g *Gateway) chunkSize() int64 { return events.FileChunkSize(g.nc.MaxPayload()) }

type beginBody struct {
	Name *string `json:"name"`
	Size *int64  `json:"size"`
}

type chunkBody struct {
	Offset *int64  `json:"offset"`
	Data   *[]byte `json:"data"`
}

// decodeBegin decodes and checks the body of an upload's begin.
func decodeBegin(body []byte, sid events.SessionID) (*events.FileBeginRequest, error) {
	var b beginBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	if b.Name == nil || b.Size == nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "name and size are required")
	}
	req := &events.FileBeginRequest{SessionID: new(string(sid)), Name: *b.Name, Size: *b.Size}
	if _, err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// decodeChunk decodes and checks the body of a chunk of the upload
// transferID, at most chunk bytes.
func decodeChunk(body []byte, sid events.SessionID, transferID string, chunk int64) (*events.FileWriteRequest, error) {
	var b chunkBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	if b.Offset == nil || b.Data == nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "offset and data are required")
	}
	if n := int64(len(*b.Data)); n > chunk {
		return nil, events.Errorf(events.CodePayloadTooLarge, "a chunk is %d bytes, more than %d", n, chunk)
	}
	req := &events.FileWriteRequest{SessionID: new(string(sid)), TransferID: transferID, Offset: *b.Offset, Data: *b.Data}
	if _, err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// handleFileBegin serves POST /v1/sessions/{id}/files/uploads.
func (g *Gateway) handleFileBegin(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpFileBegin, g.controlBodyLimit(),
		func(body []byte, sid events.SessionID) (events.Variant, error) { return decodeBegin(body, sid) },
		func(resp *events.FileTransferResponse) error {
			// The runner sized chunks by its connection; this gateway's may
			// carry less.
			return writeValue(w, map[string]any{
				"transferId": resp.TransferID, "chunkSize": min(resp.ChunkSize, g.chunkSize()), "maxBytes": resp.MaxBytes,
			})
		})
}

// handleFileWrite serves PUT /v1/sessions/{id}/files/uploads/{transferId}.
func (g *Gateway) handleFileWrite(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpFileWrite, g.chunkBodyLimit(),
		func(body []byte, sid events.SessionID) (events.Variant, error) {
			return decodeChunk(body, sid, r.PathValue("transferId"), g.chunkSize())
		},
		func(resp *events.FileWriteResponse) error {
			return writeValue(w, map[string]any{"offset": resp.Offset})
		})
}

// handleFileCommit serves POST /v1/sessions/{id}/files/uploads/{transferId}/commit.
func (g *Gateway) handleFileCommit(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpFileCommit, g.controlBodyLimit(),
		emptyBody(func(sid *string) validator {
			return &events.FileCommitRequest{SessionID: sid, TransferID: r.PathValue("transferId")}
		}),
		func(resp *events.FileCommitResponse) error { return writeValue(w, map[string]any{"file": resp.File}) })
}

// handleFileCancel serves DELETE /v1/sessions/{id}/files/uploads/{transferId}.
func (g *Gateway) handleFileCancel(w http.ResponseWriter, r *http.Request) error {
	return sessionOp(g, w, r, events.OpFileCancel, g.controlBodyLimit(),
		emptyBody(func(sid *string) validator {
			return &events.FileCancelRequest{SessionID: sid, TransferID: r.PathValue("transferId")}
		}),
		func(*events.FileCancelResponse) error { return writeValue(w, map[string]any{}) })
}

// filePath returns the one path query parameter of r ("" when absent).
func filePath(r *http.Request) (string, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", events.Errorf(events.CodeInvalidRequest, "query: %v", err)
	}
	if err := onlyKeys(q, "path"); err != nil {
		return "", err
	}
	p, _, err := single(q, "path")
	return p, err
}

// handleFileList serves GET /v1/sessions/{id}/files?path=.
func (g *Gateway) handleFileList(w http.ResponseWriter, r *http.Request) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	return sessionOp(g, w, r, events.OpFileList, 0,
		func(_ []byte, sid events.SessionID) (events.Variant, error) {
			req := &events.FileListRequest{SessionID: new(string(sid)), Path: p}
			if _, err := req.Validate(); err != nil {
				return nil, err
			}
			return req, nil
		},
		func(resp *events.FileListResponse) error {
			files := resp.Files
			if files == nil {
				files = []events.FileInfo{}
			}
			out := map[string]any{"path": resp.Path, "files": files}
			if resp.Truncated {
				out["truncated"] = true
			}
			return writeValue(w, out)
		})
}

// handleFileContent serves GET /v1/sessions/{id}/files/content?path=: the
// file's bytes, read a chunk at a time. The first read fixes the length;
// a file that changes size while it is sent ends the response short,
// which the client sees against Content-Length.
func (g *Gateway) handleFileContent(w http.ResponseWriter, r *http.Request) error {
	ns, sid, err := g.target(r)
	if err != nil {
		return err
	}
	p, err := filePath(r)
	if err != nil {
		return err
	}
	req := &events.FileReadRequest{SessionID: new(string(sid)), Path: p, Length: g.chunkSize()}
	if _, err := req.Validate(); err != nil {
		return err
	}
	read := func(off int64) (*events.FileReadResponse, error) {
		ctx, cancel := g.callContext(r)
		defer cancel()
		req.Offset = off
		return rpc.Call[events.FileReadResponse](ctx, g.nc, events.APISubject(ns, events.OpFileRead), req, principalHeader(r))
	}
	first, err := read(0)
	if err != nil {
		return err
	}
	size := first.File.Size
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	if cd := mime.FormatMediaType("attachment", map[string]string{"filename": first.File.Name}); cd != "" {
		h.Set("Content-Disposition", cd)
	}
	w.WriteHeader(http.StatusOK)
	chunk, off := first, int64(0)
	for {
		if _, err := w.Write(chunk.Data); err != nil {
			return nil // the client left
		}
		off += int64(len(chunk.Data))
		if chunk.EOF || off >= size {
			return nil
		}
		if chunk, err = read(off); err != nil || chunk.File.Size != size || len(chunk.Data) == 0 {
			g.lg.Warn("file download ended short", events.LogKeySession, string(sid), "path", p, events.LogKeyErr, err)
			panic(http.ErrAbortHandler) // the length promised cannot be kept
		}
	}
}

// writeValue answers 200 with v in JSON.
func writeValue(w http.ResponseWriter, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return events.Errorf(events.CodeInternal, "render: %v", err)
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}
