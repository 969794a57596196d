//go:build unix

package cli

import "golang.org/x/sys/unix"

// ttyColumns returns the columns of the terminal fd is, or 0.
func ttyColumns(fd uintptr) int {
	ws, err := unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// isTTY reports whether fd is a terminal (not merely a character device,
// as /dev/null is).
func isTTY(fd uintptr) bool {
	_, err := unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ)
	return err == nil
}
