// Package defaults gives a service configuration's unset fields the
// defaults its RegisterFlags installs, so that each default is written
// once, in the flag that sets it, and a Config built in code (an embedder's,
// a test's) with only some fields set means the same as the flags left
// unset.
package defaults

// Set sets *v to def when *v is its type's zero value, which for the
// fields it is used on means "the default".
func Set[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
