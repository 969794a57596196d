//go:build !unix

package cli

// ttyColumns returns 0: the width comes from $COLUMNS.
func ttyColumns(uintptr) int { return 0 }
