package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestVersionFrom(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	tests := []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "devel"},
		{"release", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: settings("vcs.revision", rev)}, "v1.2.3"},
		{"pseudo-version", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20260101120000-0123456789ab+dirty"}}, "v0.0.0-20260101120000-0123456789ab+dirty"},
		{"revision", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", rev, "vcs.modified", "false")}, "0123456789ab"},
		{"modified", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.modified", "true", "vcs.revision", rev)}, "0123456789ab-dirty"},
		{"short revision", &debug.BuildInfo{Settings: settings("vcs.revision", "12345")}, "12345"},
		{"nothing stamped", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("-buildvcs", "false")}, "devel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionFrom(tt.info); got != tt.want {
				t.Errorf("versionFrom(%+v) = %q, want %q", tt.info, got, tt.want)
			}
		})
	}
}

func TestSemVerOf(t *testing.T) {
	tests := []struct{ version, want string }{
		{"v1.2.3", "1.2.3"},
		{"v1.2.3-rc.1", "1.2.3-rc.1"},
		{"v0.0.0-20260101120000-0123456789ab", "0.0.0-20260101120000-0123456789ab"},
		{"v0.0.0-20260101120000-0123456789ab+dirty", "0.0.0-20260101120000-0123456789ab+dirty"},
		{"devel", "0.0.0-devel"},
		{"", "0.0.0-devel"},
		{"0123456789ab", "0.0.0-devel+0123456789ab"},
		{"0123456789ab-dirty", "0.0.0-devel+0123456789ab-dirty"},
		{"v1.2", "0.0.0-devel+v1.2"},
		{"weird/rev..x", "0.0.0-devel"},
		{"rev_1", "0.0.0-devel+rev-1"},
	}
	for _, tt := range tests {
		got := semVerOf(tt.version)
		if got != tt.want {
			t.Errorf("semVerOf(%q) = %q, want %q", tt.version, got, tt.want)
		}
		if !semVer.MatchString(got) {
			t.Errorf("semVerOf(%q) = %q, not a semantic version", tt.version, got)
		}
	}
}

// FuzzSemVerOf checks that whatever a build stamps, nats micro accepts
// the service version made of it.
func FuzzSemVerOf(f *testing.F) {
	for _, s := range []string{"v1.2.3", "devel", "0123456789ab-dirty", "v0.0.0-20260101120000-0123456789ab+dirty", "v01.2.3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if got := semVerOf(v); !semVer.MatchString(got) {
			t.Fatalf("semVerOf(%q) = %q, not a semantic version", v, got)
		}
	})
}
