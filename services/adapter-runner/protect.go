package adapterrunner

import (
	"path/filepath"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
)

// Protected paths. The sandbox grants an adapter its session's working
// directories whole: Landlock only ever adds rights to a subtree, and has
// no rule that takes a part of one back. A working directory that holds
// what no agent may reach (skein dev's NATS store, its tokens and
// passwords, the runner's data directory with every session's HOME)
// therefore hands all of it to the agent, however strict the sandbox. It
// happens when skein dev runs in a project with its data directory inside
// it (the default, .skein) and a session works in the project.
//
// Config.Protected names those paths, and the runner checks every
// session's working directories against them at launch, after confine:
// one that holds a protected path, or lies inside one, is what the
// sandbox cannot confine. The sandbox mode decides, as it does for a
// kernel without Landlock: require refuses the session, warn starts it
// with a warning in the runner's log, off says nothing.

// protect applies the sandbox mode to the working directories of spec
// that expose a protected path: spec.cwd and spec.dirs, the paths confine
// opened them as (the kernel's names for the held directories, no
// symlink in them). An agent cannot move its directory into the
// runner's data nor that data into its directory afterwards: it has no
// write access to either parent.
func (r *Runner) protect(sid events.SessionID, agent Agent, spec *spawnSpec) error {
	if len(r.cfg.Protected) == 0 || r.cfg.Sandbox == SandboxOff {
		return nil
	}
	dirs := append([]string{spec.cwd}, spec.dirs...)
	for i, d := range dirs {
		dir, prot, ok := exposes(d, r.cfg.Protected)
		if !ok {
			continue
		}
		what := "cwd"
		if i > 0 {
			what = "additionalDirectories entry"
		}
		if r.cfg.Sandbox == SandboxRequire {
			return events.Errorf(events.CodeInvalidRequest,
				"%s %q holds Skein's own data or lies in it, which no sandbox can keep from the agent there (adapter-runner.sandbox is require): work in a directory of its own, or keep the data directory out of the workspace",
				what, events.Truncate(d, 200))
		}
		r.lg.Warn("starting an adapter whose working directory exposes Skein's own data: the sandbox grants a directory whole and cannot exclude it (adapter-runner.sandbox=warn)",
			events.LogKeySession, string(sid), events.LogKeyAgent, agent.ID, "dir", dir, "protected", prot)
	}
	return nil
}

// exposes reports whether dir holds one of protected or lies inside one,
// with both resolved as far as they exist, and which.
func exposes(dir string, protected []string) (resolvedDir, prot string, ok bool) {
	resolvedDir = resolveExisting(dir)
	for _, p := range protected {
		rp := resolveExisting(p)
		if workspace.Under(rp, resolvedDir) || workspace.Under(resolvedDir, rp) {
			return resolvedDir, rp, true
		}
	}
	return resolvedDir, "", false
}

// resolveExisting returns p absolute and clean, its symlinks resolved as
// far as it exists (workspace.Resolve), or only cleaned when that fails.
func resolveExisting(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if real, err := workspace.Resolve(p); err == nil {
		return real
	}
	return filepath.Clean(p)
}
