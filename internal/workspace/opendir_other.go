//go:build !unix

package workspace

// openDirFlags: no such flags here; the Stat after the open checks.
const openDirFlags = 0
