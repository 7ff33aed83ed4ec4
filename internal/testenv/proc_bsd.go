//go:build unix && !linux

package testenv

import (
	"bytes"
	"os/exec"
	"strconv"
	"syscall"
)

// sysProcAttr puts a child in its own process group and runs it as
// spec.user. Without a parent-death signal here, a server outlives a test
// binary that dies without running its cleanups.
func sysProcAttr(spec procSpec) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: credential(spec.user)}
}

func spawn(cmd *exec.Cmd) error { return cmd.Start() }

// processTable asks ps.
func processTable() []psEntry {
	b, err := exec.Command("ps", "-A", "-o", "pid=", "-o", "ppid=", "-o", "stat=").Output()
	if err != nil {
		return nil
	}
	var out []psEntry
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) < 3 {
			continue
		}
		pid, err1 := strconv.Atoi(string(f[0]))
		ppid, err2 := strconv.Atoi(string(f[1]))
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, psEntry{pid: pid, ppid: ppid, state: f[2][0]})
	}
	return out
}

// procState returns the state letter of pid.
func procState(pid int) (byte, bool) {
	for _, e := range processTable() {
		if e.pid == pid {
			return e.state, true
		}
	}
	return 0, false
}
