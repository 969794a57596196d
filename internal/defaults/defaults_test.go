package defaults_test

import (
	"testing"
	"time"

	"skein.dev/internal/defaults"
)

func TestSet(t *testing.T) {
	unset, set, negative := time.Duration(0), 3*time.Second, -time.Second
	for _, v := range []*time.Duration{&unset, &set, &negative} {
		defaults.Set(v, time.Minute)
	}
	if unset != time.Minute || set != 3*time.Second || negative != -time.Second {
		t.Errorf("after Set: unset %v, set %v, negative %v; want 1m0s, 3s, -1s", unset, set, negative)
	}
}
