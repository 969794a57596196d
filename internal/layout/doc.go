// Package layout holds the tests of the repository's shape: which package
// may import which, and that docs/ARCHITECTURE.md maps every package. It
// has no code of its own.
package layout
