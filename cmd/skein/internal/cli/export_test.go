package cli

import "io"

// NewVisibleWriter returns the writer by which a download reaches a
// terminal: what it is given, made Visible, as it comes.
func NewVisibleWriter(w io.Writer) io.WriteCloser { return &visibleWriter{w: w} }
