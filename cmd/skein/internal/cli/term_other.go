//go:build !unix

package cli

// ttyColumns returns 0: the width comes from $COLUMNS.
func ttyColumns(uintptr) int { return 0 }

// isTTY reports false: a terminal is not told from a pipe here.
func isTTY(uintptr) bool { return false }
