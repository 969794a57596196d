// Package buildinfo names the version of the running binary, from its
// build info, in the two forms Skein needs: as it is (Version) and as the
// semantic version nats micro requires (ServiceVersion).
package buildinfo

import (
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
)

// Version returns the version of the running binary, read once from its
// build info (runtime/debug.ReadBuildInfo):
//
//   - the main module's version, when the go command stamped one: a
//     release tag (v1.2.3) or a pseudo-version
//     (v0.0.0-20260101120000-0123456789ab), with +dirty for a modified
//     tree;
//   - else the VCS revision the binary was built from, shortened to 12
//     characters, with -dirty for a modified tree (0123456789ab-dirty);
//   - else "devel": go run, a test binary, a build with -buildvcs=false.
//
// It is what Skein calls itself everywhere it names a version: the
// services' nats micro version (rpc.AddService) and the clientInfo the
// adapter-runner sends to agents.
func Version() string { return buildVersion() }

var buildVersion = sync.OnceValue(func() string {
	info, _ := debug.ReadBuildInfo()
	return versionFrom(info)
})

// versionFrom is Version for the build info info (nil when there is none).
func versionFrom(info *debug.BuildInfo) string {
	if info == nil {
		return "devel"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var revision, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if revision == "" {
		return "devel"
	}
	if len(revision) > 12 {
		revision = revision[:12]
	}
	if modified == "true" {
		revision += "-dirty"
	}
	return revision
}

// semVer is the semantic version regexp nats micro checks Config.Version
// against (nats.go micro/service.go, the one suggested at semver.org).
var semVer = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// ServiceVersion returns Version as the semantic version nats micro
// requires: a module version without its "v" (1.2.3,
// 0.0.0-20260101120000-0123456789ab+dirty); otherwise 0.0.0-devel, with
// the revision, if any, as build metadata (0.0.0-devel+0123456789ab-dirty),
// which semantic versioning ignores when ordering.
func ServiceVersion() string { return semVerOf(Version()) }

// semVerOf returns v as a semantic version, as ServiceVersion describes.
func semVerOf(v string) string {
	if s := strings.TrimPrefix(v, "v"); s != v && semVer.MatchString(s) {
		return s
	}
	if v == "devel" || v == "" {
		return "0.0.0-devel"
	}
	// A revision: keep what build metadata may hold.
	meta := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '.' {
			return r
		}
		return '-'
	}, v)
	if s := "0.0.0-devel+" + meta; semVer.MatchString(s) {
		return s
	}
	return "0.0.0-devel"
}
