package adapterrunner

import (
	"context"

	"skein.dev/pkg/events"
)

// handleListDirectories serves OpListDirectories for the namespace of its
// subject: the folders a session of that namespace may work in, listed
// with the roots and grants this runner confines adapters to
// (workspace.Roots.List, which opens the folder as a cwd is opened,
// beneath the namespace's directory, and reads the held descriptor). The runner serves it, not the session service,
// because the runner's view of the workspace is the one a cwd is finally
// checked against and the agent works in (docs/design/workspaces.md). Any
// runner answers: a session restores on any runner, so every runner must
// see the same workspace.
func (r *Runner) handleListDirectories(_ context.Context, ns events.Namespace, data []byte) (events.Variant, error) {
	req, err := events.Decode[events.ListDirectoriesRequest](data)
	if err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	resp, err := r.cfg.WorkspaceRoots.List(ns, r.cfg.WorkspaceGrants, req.Path, events.MaxDirectoryEntries)
	if err != nil {
		return nil, err
	}
	return resp, nil
}
