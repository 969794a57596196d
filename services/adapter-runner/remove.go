package adapterrunner

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
)

// A deleted session's files: its HOME and TMPDIR, <data-dir>/<namespace>/
// <session ID>, and its default workspace, <first root>/<namespace>/
// <session ID>, are removed when the session is deleted, so that reopening
// its ID finds nothing of before. A cwd the user gave at open is theirs,
// and stays.
//
// The agent worked in both directories and may have left anything there,
// symbolic links to other tenants' files among them. Each is removed
// through an os.Root opened on its parent, <data-dir>/<namespace> or
// <root>/<namespace>: the session's directory is one element below it,
// and os.Root.RemoveAll unlinks what it finds without following a link,
// at any depth. The adapter is stopped first, and removal waits for it.

// handleRemove serves RunnerRemove for the session the headers name.
func (r *Runner) handleRemove(ctx context.Context, _ events.Namespace, data []byte) (events.Variant, error) {
	ns, sid, err := sessionOf(ctx)
	if err != nil {
		return nil, err
	}
	req, err := events.Decode[events.RunnerRemoveRequest](data)
	if err != nil {
		return nil, err
	}
	// Normally stopped already, by the delete that sends this; stopping
	// again is a no-op, and waits for a process still here to end.
	if _, err := r.handleStop(ctx, ns, nil); err != nil {
		return nil, err
	}
	roots := r.cfg.WorkspaceRoots
	var errs []error
	// The data directory's namespace directory must not be a workspace
	// root's, nor hold one (a namespace named like the default root,
	// "workspaces"): removing a session's HOME there would remove a
	// namespace's workspaces.
	dataNS := filepath.Join(r.cfg.DataDir, string(ns))
	if holdsRoot(dataNS, roots) {
		r.lg.Warn("a session's HOME lies among the workspaces: left in place", events.LogKeySession, string(sid), "dir", filepath.Join(dataNS, string(sid)))
	} else {
		errs = append(errs, removeUnder(dataNS, string(sid)))
	}
	if def := roots.Default(ns, sid); def != "" && !req.KeepWorkspace && (req.Cwd == "" || filepath.Clean(req.Cwd) == def) {
		errs = append(errs, removeUnder(filepath.Dir(def), string(sid)))
	}
	if err := errors.Join(errs...); err != nil {
		// The file system's reason names paths: logged, not told.
		r.lg.Warn("cannot remove a deleted session's files", events.LogKeySession, string(sid), events.LogKeyErr, err)
		return nil, events.Errorf(events.CodeUnavailable, "runner %s could not remove the files of %s", r.cfg.ID, sid)
	}
	r.lg.Info("deleted session's files removed", events.LogKeySession, string(sid))
	return &events.RunnerAck{}, nil
}

// holdsRoot reports whether dir is a workspace root, lies under one, or
// holds one.
func holdsRoot(dir string, roots workspace.Roots) bool {
	for _, root := range roots {
		if workspace.Under(dir, root) || workspace.Under(root, dir) {
			return true
		}
	}
	return false
}

// removeUnder removes name, one element, and all it holds from directory
// parent, following no symbolic link: not parent's own (parent is opened
// as the operator made it, by this process), nor any below it. A parent
// that does not exist holds nothing to remove.
func removeUnder(parent, name string) error {
	root, err := os.OpenRoot(parent)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer root.Close()
	return root.RemoveAll(name)
}
