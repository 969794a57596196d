//go:build linux

package adapterrunner

import (
	"io"
	"log/slog"
	"path/filepath"

	"skein.dev/pkg/events"
)

// CgroupScopes returns the directories, one per cgroup hierarchy the
// machine gives, under which a runner of id on dataDir makes its
// adapters' cgroups; none where it has no cgroup the runner may write.
func CgroupScopes(dataDir, id string) []string {
	h := findCgroups(slog.New(slog.NewTextHandler(io.Discard, nil)), cgroupScope(dataDir, id))
	var out []string
	if h.v2 != "" {
		out = append(out, h.v2)
	}
	for _, d := range h.v1 {
		out = append(out, d)
	}
	return out
}

// CgroupOf returns the directories of the cgroups of adapter process
// processID of session sid of namespace default.
func CgroupOf(scopes []string, sid, processID string) []string {
	var out []string
	for _, s := range scopes {
		out = append(out, filepath.Join(s, cgroupName(events.DefaultNamespace, events.SessionID(sid), processID)))
	}
	return out
}
