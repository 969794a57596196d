//go:build !linux

package cluster

import "syscall"

func sysProcAttr(bool) *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }
