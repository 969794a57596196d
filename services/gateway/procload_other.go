//go:build !linux

package gateway

// readProcLoad knows no limits here (no /proc): /readyz checks none.
func readProcLoad() procLoad { return procLoad{} }
