package adapterrunner

import (
	"os"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
)

// confine applies the launch-time checks of what a session asks its
// adapter to be given (package workspace): its env names against the
// agent's allowEnv, its cwd and additional directories against the
// workspace roots, each with symlinks resolved now. The session service
// checked the same at open, but the roots may have changed since, and a
// directory may since have been swapped for a symlink: this is the check
// the agent gets. It sets spec.cwd to the resolved working directory (the
// session's default, <first root>/<namespace>/<session ID>, when it names
// none), created if missing.
func (r *Runner) confine(ns events.Namespace, sid events.SessionID, agent Agent, spec *spawnSpec) error {
	if err := workspace.CheckEnv(agent.ID, agent.AllowEnv, spec.env); err != nil {
		return err
	}
	roots := r.cfg.WorkspaceRoots
	for _, d := range spec.dirs {
		if _, err := roots.Check("additionalDirectories entry", d); err != nil {
			return err
		}
	}
	cwd := spec.cwd
	if cwd == "" {
		cwd = roots.Default(ns, sid)
	}
	resolved, err := roots.Check("cwd", cwd)
	if err != nil {
		return err
	}
	// Created only now that it is known to be confined: the nearest
	// existing ancestor was resolved, and the rest does not exist.
	if err := os.MkdirAll(resolved, 0o700); err != nil {
		return events.Errorf(events.CodeInvalidRequest, "cwd %q: %v", cwd, err)
	}
	// A symlink planted between the check and the mkdir would be
	// followed by MkdirAll; checking again catches it.
	if resolved, err = roots.Check("cwd", resolved); err != nil {
		return err
	}
	spec.cwd = resolved
	return nil
}
