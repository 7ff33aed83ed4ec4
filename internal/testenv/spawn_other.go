//go:build unix && !linux

package testenv

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts a child in its own process group and runs it as
// spec.user. There is no parent-death signal here: a server outlives a test
// binary that dies without running its cleanups.
func sysProcAttr(spec procSpec) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: credential(spec.user)}
}

func spawn(cmd *exec.Cmd) error { return cmd.Start() }
