package adapterrunner

import (
	"path/filepath"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
)

// confine applies the launch-time checks of what a session asks its
// adapter to be given (package workspace): its env names against the
// agent's allowEnv (and that a process can be given them at all), its
// cwd and additional directories against its namespace's directory under
// the workspace roots and its grants. The session service checked the
// same at open, but the roots may have changed since, and a directory may
// since have been swapped for a symlink, or be swapped at any instant:
// this is the check the agent gets.
//
// Each directory is resolved once and held open (workspace.Roots.Open),
// the cwd created if missing (the session's default,
// <first root>/<namespace>/<session ID>, when it names none), and the
// adapter gets the held directories, never their names: it starts in the
// held cwd and its sandbox grants the held inodes (spec.held). spec.cwd
// and spec.dirs become the paths they were opened as, for the ACP
// session and the logs. An additional directory that does not exist, or
// that could not be opened at this instant though a look by name finds it
// confined, is left out: the sandbox grants nothing there. The caller
// closes spec.held (closeHeld) once the adapter has started.
func (r *Runner) confine(ns events.Namespace, sid events.SessionID, agent Agent, spec *spawnSpec) error {
	if err := workspace.CheckEnv(agent.ID, agent.AllowEnv, spec.env); err != nil {
		return err
	}
	roots, grants := r.cfg.WorkspaceRoots, r.cfg.WorkspaceGrants
	if err := r.ownDirApart(ns, sid); err != nil {
		return err
	}
	cwd := spec.cwd
	if cwd == "" {
		cwd = roots.Default(ns, sid)
	}
	held, err := roots.Open(ns, grants, "cwd", cwd, true)
	if err != nil {
		return err
	}
	spec.held = []*workspace.Dir{held}
	var dirs []string
	for _, d := range spec.dirs {
		dir, err := roots.Open(ns, grants, "additionalDirectories entry", d, false)
		if err != nil {
			if _, cerr := roots.Check(ns, grants, "additionalDirectories entry", d); cerr != nil {
				spec.closeHeld()
				return cerr
			}
			r.lg.Info("an additional directory is not there: the agent gets nothing of it", events.LogKeySession, string(sid), "dir", d)
			continue
		}
		spec.held = append(spec.held, dir)
		dirs = append(dirs, dir.Path())
	}
	spec.cwd, spec.dirs = held.Path(), dirs
	if err := r.protect(sid, agent, spec); err != nil {
		spec.closeHeld()
		return err
	}
	return nil
}

// closeHeld lets the directories confine held go.
func (s *spawnSpec) closeHeld() {
	for _, d := range s.held {
		_ = d.Close()
	}
	s.held = nil
}

// ownDirApart refuses a session whose own directory under the data dir,
// <data-dir>/<namespace>/<session ID> (its HOME and TMPDIR, which the
// sandbox grants it whole), lies in another namespace's directory under a
// workspace root, or holds a root: with the default root
// <data-dir>/workspaces, a namespace named "workspaces" would otherwise
// get, as the HOME of its session "default", the workspace of namespace
// default's session "home". Each is compared as written and with its
// symlinks resolved.
func (r *Runner) ownDirApart(ns events.Namespace, sid events.SessionID) error {
	own := filepath.Join(r.cfg.DataDir, string(ns), string(sid))
	resolved := func(p string) string {
		if rp, err := workspace.Resolve(p); err == nil {
			return rp
		}
		return p
	}
	crosses := func(own, root string) bool {
		return workspace.Under(own, root) && !workspace.Under(own, filepath.Join(root, string(ns))) ||
			workspace.Under(root, own)
	}
	for _, root := range r.cfg.WorkspaceRoots {
		root = filepath.Clean(root)
		if crosses(own, root) || crosses(resolved(own), resolved(root)) {
			r.lg.Error("a session's own directory lies in another namespace's workspace: refused; "+
				"rename the namespace, or move the workspace roots out of the data dir",
				events.LogKeySession, string(sid), "dir", own, "root", root)
			return events.Errorf(events.CodeInvalidRequest,
				"namespace %s cannot run sessions on this runner: its name is taken by the runner's workspace layout", ns)
		}
	}
	return nil
}
