package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
)

// sysProcAttr puts a child in its own process group, runs it as spec.user
// and has the kernel signal it when the test binary dies: SIGKILL for
// servers, SIGTERM for the watchdog (which then cleans up).
func sysProcAttr(spec procSpec) *syscall.SysProcAttr {
	sig := syscall.SIGKILL
	if spec.watchdog {
		sig = syscall.SIGTERM
	}
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: sig, Credential: credential(spec.user)}
}

// The parent-death signal fires when the OS thread that started the child
// exits, not the process. Go may end threads (those of goroutines that
// exit while locked to them), so every child is started from one goroutine
// locked to its thread for the life of the process.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawnReqs {
				r.err <- r.cmd.Start()
			}
		}()
	})
	r := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawnReqs <- r
	return <-r.err
}

// processTable reads /proc.
func processTable() []psEntry {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]psEntry, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ppid, ok := readStat(pid); ok {
			out = append(out, psEntry{pid: pid, ppid: ppid, state: st})
		}
	}
	return out
}

// procState returns the state letter of pid.
func procState(pid int) (byte, bool) {
	st, _, ok := readStat(pid)
	return st, ok
}

// readStat parses /proc/pid/stat: "pid (comm) state ppid ...", where comm
// may hold spaces and parentheses.
func readStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) == 0 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(string(f[1]))
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], ppid, true
}
