package adapterrunner

import (
	"fmt"
	"strconv"
	"strings"
)

// portRange is a range of TCP ports, both ends included.
type portRange [2]uint16

// parsePorts parses an agent's sandbox bind list: ports ("8080") and
// ranges ("3000-3999"), 1 to 65535, each range's first end no greater
// than its last.
func parsePorts(specs []string) ([]portRange, error) {
	var out []portRange
	for _, s := range specs {
		lo, hi, isRange := strings.Cut(s, "-")
		if !isRange {
			hi = lo
		}
		a, err := parsePort(lo)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		b, err := parsePort(hi)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		if a > b {
			return nil, fmt.Errorf("%q: a range's first port must not pass its last", s)
		}
		out = append(out, portRange{a, b})
	}
	return out, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 || s != strconv.FormatUint(n, 10) {
		return 0, fmt.Errorf("want a port, 1 to 65535, or a range of them (3000-3999)")
	}
	return uint16(n), nil
}
