package cli

import (
	"os"
	"strconv"
)

// isTerminal reports whether f, a reader or writer, is an interactive
// terminal: it reports a file mode (an *os.File does) and the mode is a
// character device. That test is cheap and portable but also holds for
// /dev/null, whose first read ends the questions at once.
func isTerminal(f any) bool {
	s, ok := f.(interface{ Stat() (os.FileInfo, error) })
	if !ok {
		return false
	}
	fi, err := s.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// termWidth returns the width of the terminal w is, in columns: what the
// terminal says, else $COLUMNS, else 80.
func termWidth(w any, getenv func(string) string) int {
	if f, ok := w.(interface{ Fd() uintptr }); ok {
		if n := ttyColumns(f.Fd()); n > 0 {
			return n
		}
	}
	if n, err := strconv.Atoi(getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 80
}
