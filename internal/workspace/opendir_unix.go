//go:build unix && !linux

package workspace

import "syscall"

// openDirFlags open a directory where openat2 is not had (Linux opens
// one O_DIRECTORY through openat2, open_linux.go): O_DIRECTORY refuses anything
// else (a FIFO, a device) before it is opened, and O_NONBLOCK keeps the
// open from waiting on one swapped in meanwhile.
const openDirFlags = syscall.O_DIRECTORY | syscall.O_NONBLOCK
