package session

import (
	"context"
	"slices"

	"github.com/nats-io/nats.go"

	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
)

// File ops (events.OpFile*): the session service owns no file, but it
// knows the session's working directory (its SessionOpened record) and
// which runner hosts its adapter, so it checks the request, finds the
// runner, and forwards the op there as one RunnerFile request. Nothing is
// written to the log and no adapter is started: files are workspace
// state, like what the agent writes there.
//
// The runner is, in order: the one a transfer ID names (each chunk and
// the commit go where the upload began, whichever replica forwards them
// and wherever the adapter went meanwhile); the runner hosting the
// session's adapter; the runner that hosted it last, while alive; else
// the first alive runner with the session's agent installed. The last two
// read the same directory only when runners share the workspace, which a
// restore on another runner needs anyway (docs/design/workspaces.md,
// Attachments).

func (s *Service) handleFileBegin(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, sess, err := requestFor[events.FileBeginRequest](s, ns, data)
	if err != nil {
		return nil, err
	}
	return fileCall[events.FileTransferResponse](ctx, sess, "", &events.RunnerFileRequest{Begin: req})
}

func (s *Service) handleFileWrite(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, sess, err := requestFor[events.FileWriteRequest](s, ns, data)
	if err != nil {
		return nil, err
	}
	return fileCall[events.FileWriteResponse](ctx, sess, req.TransferID, &events.RunnerFileRequest{Write: req})
}

func (s *Service) handleFileCommit(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, sess, err := requestFor[events.FileCommitRequest](s, ns, data)
	if err != nil {
		return nil, err
	}
	return fileCall[events.FileCommitResponse](ctx, sess, req.TransferID, &events.RunnerFileRequest{Commit: req})
}

func (s *Service) handleFileCancel(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, sess, err := requestFor[events.FileCancelRequest](s, ns, data)
	if err != nil {
		return nil, err
	}
	return fileCall[events.FileCancelResponse](ctx, sess, req.TransferID, &events.RunnerFileRequest{Cancel: req})
}

func (s *Service) handleFileList(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, sess, err := requestFor[events.FileListRequest](s, ns, data)
	if err != nil {
		return nil, err
	}
	return fileCall[events.FileListResponse](ctx, sess, "", &events.RunnerFileRequest{List: req})
}

func (s *Service) handleFileRead(ctx context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, sess, err := requestFor[events.FileReadRequest](s, ns, data)
	if err != nil {
		return nil, err
	}
	return fileCall[events.FileReadResponse](ctx, sess, "", &events.RunnerFileRequest{Read: req})
}

// fileCall forwards req to the session's runner (transferID's, when set)
// and returns its answer. The session's lock is held only to read where
// to send it: a chunk in flight never holds up a prompt.
func fileCall[T any, PT interface {
	*T
	events.Variant
}](ctx context.Context, sess *session, transferID string, req *events.RunnerFileRequest) (PT, error) {
	runner, cwd, err := sess.fileTarget(ctx, transferID)
	if err != nil {
		return nil, err
	}
	req.Cwd = cwd
	cctx, cancel := context.WithTimeout(ctx, sess.svc.cfg.CallTimeout)
	defer cancel()
	hdr := nats.Header{
		events.HeaderNamespace: []string{string(sess.ns)},
		events.HeaderSessionID: []string{string(sess.sid)},
	}
	// The runner bounds the uploads in progress of each principal.
	if p := rpc.RequestHeaders(ctx).Get(events.HeaderPrincipal); p != "" {
		hdr.Set(events.HeaderPrincipal, p)
	}
	resp, err := rpc.Call[T, PT](cctx, sess.svc.nc, events.RunnerSubject(runner, events.RunnerFile), req, hdr)
	if err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			return nil, events.Errorf(events.CodeTimeout, "runner %s did not answer a file request in %v", runner, sess.svc.cfg.CallTimeout)
		}
		return nil, err
	}
	return resp, nil
}

// fileTarget returns the runner to serve a file op of the session and its
// working directory as opened.
func (sess *session) fileTarget(ctx context.Context, transferID string) (events.RunnerID, string, error) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if err := sess.loadExisting(ctx); err != nil {
		return "", "", err
	}
	cwd, agent := sess.opened.Cwd, sess.opened.Agent
	switch {
	case transferID != "":
		runner, err := events.TransferRunner(transferID)
		return runner, cwd, err
	case sess.adapter != nil:
		return sess.adapter.runner, cwd, nil
	case sess.opened.Runner != "":
		// Its files are where its agent works: on its runner only.
		pin := sess.opened.Runner
		if !sess.svc.runners.aliveSet()[pin] {
			return "", "", events.Errorf(events.CodeAgentUnavailable, "runner %s is not connected; session %s is pinned to it", pin, sess.sid)
		}
		return events.RunnerID(pin), cwd, nil
	}
	if last := sess.meta.RunnerID; last != "" && sess.svc.runners.aliveSet()[last] {
		return events.RunnerID(last), cwd, nil
	}
	runner, err := sess.svc.runners.withAgent(ctx, agent)
	return runner, cwd, err
}

// withAgent returns the first alive runner, by ID, that has agent
// installed, whatever its load, and may host unpinned sessions (eligible):
// a file op starts no adapter. A miss re-reads the
// bucket once, as placement does.
func (d *runnerDirectory) withAgent(ctx context.Context, agent string) (events.RunnerID, error) {
	find := func() events.RunnerID {
		d.mu.Lock()
		defer d.mu.Unlock()
		var ids []string
		for id, r := range d.runners {
			for _, a := range r.Agents {
				if a.ID == agent && a.Installed && d.eligible(r, "") {
					ids = append(ids, id)
				}
			}
		}
		if len(ids) == 0 {
			return ""
		}
		return events.RunnerID(slices.Min(ids))
	}
	if id := find(); id != "" {
		return id, nil
	}
	if err := d.refresh(ctx); err != nil {
		return "", events.Errorf(events.CodeUnavailable, "read runners: %v", err)
	}
	d.vouchAll(ctx)
	if id := find(); id != "" {
		return id, nil
	}
	return "", events.Errorf(events.CodeAgentUnavailable, "no runner with agent %q is alive to serve the session's files", agent)
}
