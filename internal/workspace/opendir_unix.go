//go:build unix

package workspace

import "syscall"

// openDirFlags open a directory to list: O_DIRECTORY refuses anything
// else (a FIFO, a device) before it is opened, and O_NONBLOCK keeps the
// open from waiting on one swapped in meanwhile.
const openDirFlags = syscall.O_DIRECTORY | syscall.O_NONBLOCK
