package adapterrunner

import (
	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
)

// confine applies the launch-time checks of what a session asks its
// adapter to be given (package workspace): its env names against the
// agent's allowEnv (and that a process can be given them at all), its
// cwd and additional directories against its namespace's directory under
// the workspace roots and its grants, each with symlinks resolved now. The session service
// checked the same at open, but the roots may have changed since, and a
// directory may since have been swapped for a symlink: this is the check
// the agent gets. It sets spec.cwd to the resolved working directory (the
// session's default, <first root>/<namespace>/<session ID>, when it names
// none), created if missing.
func (r *Runner) confine(ns events.Namespace, sid events.SessionID, agent Agent, spec *spawnSpec) error {
	if err := workspace.CheckEnv(agent.ID, agent.AllowEnv, spec.env); err != nil {
		return err
	}
	roots, grants := r.cfg.WorkspaceRoots, r.cfg.WorkspaceGrants
	for _, d := range spec.dirs {
		if _, err := roots.Check(ns, grants, "additionalDirectories entry", d); err != nil {
			return err
		}
	}
	cwd := spec.cwd
	if cwd == "" {
		cwd = roots.Default(ns, sid)
	}
	resolved, err := roots.Check(ns, grants, "cwd", cwd)
	if err != nil {
		return err
	}
	// Created only now that it is known to be confined: the nearest
	// existing ancestor was resolved, and the rest does not exist.
	// The file system's reason (a file in the way, a permission) is
	// logged, not told: it names the resolved path.
	if err := spec.user.mkdir(resolved); err != nil { // the adapters' user's, what it makes
		r.lg.Warn("cannot create a session's cwd", events.LogKeySession, string(sid), events.LogKeyErr, err)
		return events.Errorf(events.CodeInvalidRequest, "cwd %q cannot be created", cwd)
	}
	// A symlink planted between the check and the mkdir would be
	// followed by MkdirAll; checking again catches it. The path checked
	// is the one the session named, so that a refusal echoes only that.
	if resolved, err = roots.Check(ns, grants, "cwd", cwd); err != nil {
		return err
	}
	spec.cwd = resolved
	return r.protect(sid, agent, spec)
}
