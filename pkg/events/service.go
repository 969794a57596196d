package events

import (
	"regexp"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
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
// services' nats micro version (see AddService) and the clientInfo the
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

// AddService is micro.AddService for Skein's services: when cfg.Version is
// empty it is set to ServiceVersion, so that every service reports the
// version of the binary it runs in (nats micro info, $SRV.INFO) and no
// service writes a version literal. Everything else in cfg is passed on
// unchanged; errors are micro.AddService's.
func AddService(nc *nats.Conn, cfg micro.Config) (micro.Service, error) {
	if cfg.Version == "" {
		cfg.Version = ServiceVersion()
	}
	return micro.AddService(nc, cfg)
}
