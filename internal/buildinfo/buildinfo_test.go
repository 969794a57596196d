package buildinfo_test

import (
	"strings"
	"testing"

	"skein.dev/internal/buildinfo"
)

func TestVersion(t *testing.T) {
	v := buildinfo.Version()
	if v == "" || v != buildinfo.Version() {
		t.Fatalf("Version() = %q, then %q: want one non-empty value", v, buildinfo.Version())
	}
	if sv := buildinfo.ServiceVersion(); !strings.Contains(sv, strings.TrimPrefix(v, "v")) {
		t.Errorf("ServiceVersion() = %q, which does not show Version() %q", sv, v)
	}
}
