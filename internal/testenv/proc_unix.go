//go:build unix

package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Each process is started in a process group of its own, so that SIGKILL,
// SIGSTOP and SIGCONT reach whatever it forked and never the test binary,
// and (on Linux) with a parent-death signal; see spawn_linux.go.

// startProc starts spec.
func startProc(spec procSpec) (*proc, error) {
	out, err := openLog(spec.log)
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child has its own copy
	cmd := exec.Command(spec.path, spec.args...)
	cmd.Dir = spec.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr(spec)
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	p := &proc{spec: spec, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func openLog(path string) (*os.File, error) {
	if path == "" {
		path = os.DevNull
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	return f, nil
}

// credential turns u into the credential a child runs with.
func credential(u *osUser) *syscall.Credential {
	if u == nil {
		return nil
	}
	return &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}
}

// signalGroup sends sig to p's process group, unless p has exited (its pid
// may belong to another process by now).
func (p *proc) signalGroup(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%v %s (pid %d): %w", sig, p.spec.name, p.pid, err)
	}
	return nil
}

// stop continues p if it is paused, sends it sig and waits up to grace for
// it to exit; then it kills it. A PostgreSQL postmaster ends its backends
// before it exits.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) error {
	if err := p.resume(); err != nil {
		return err
	}
	if p.exited() {
		return nil
	}
	_ = syscall.Kill(p.pid, sig)
	if !p.wait(grace) {
		err := p.kill()
		return errors.Join(fmt.Errorf("%s did not exit within %v of %v; killed", p.spec.name, grace, sig), err)
	}
	return nil
}

// kill kills p's process group with SIGKILL and waits until p is gone.
// Processes that left the group (PostgreSQL's backends, which start
// sessions of their own) exit once they see the postmaster gone.
func (p *proc) kill() error {
	_ = p.signalGroup(syscall.SIGKILL)
	if !p.wait(signalTimeout) {
		return fmt.Errorf("%s (pid %d) still running %v after SIGKILL", p.spec.name, p.pid, signalTimeout)
	}
	return nil
}

// pause stops p's process group with SIGSTOP and, where /proc tells,
// waits until p is stopped.
func (p *proc) pause() error {
	if err := p.signalGroup(syscall.SIGSTOP); err != nil {
		return err
	}
	p.signalChildren(syscall.SIGSTOP)
	deadline := time.Now().Add(signalTimeout)
	for {
		st, ok := procState(p.pid)
		if !ok || st == 'T' || st == 't' || st == 'Z' || st == 'X' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) in state %c %v after SIGSTOP", p.spec.name, p.pid, st, signalTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// resume continues p's process group with SIGCONT.
func (p *proc) resume() error {
	p.signalChildren(syscall.SIGCONT)
	return p.signalGroup(syscall.SIGCONT)
}

// signalChildren sends sig to each child of p found in /proc: a PostgreSQL
// backend leaves the postmaster's process group (setsid), so SIGSTOP of
// the group alone would leave open connections answering. Where there is
// no Linux-style /proc it does nothing.
func (p *proc) signalChildren(sig syscall.Signal) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := procParent(pid); ok && ppid == p.pid {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// procParent returns the parent pid of pid from /proc/pid/stat (the field
// after the state letter).
func procParent(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+4 >= len(b) {
		return 0, false
	}
	f := bytes.Fields(b[i+2:])
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(string(f[1]))
	return ppid, err == nil
}

// procState returns the state letter of pid from /proc/pid/stat ("pid
// (comm) state ..."; comm may hold spaces and parentheses): R, S, T
// (stopped), Z (zombie)... It reports false where there is no such file:
// pid is gone, or the system has no Linux-style /proc.
func procState(pid int) (byte, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, false
	}
	return b[i+2], true
}

// pidExists reports whether a process pid exists (as far as this user can
// tell: EPERM means it does).
func pidExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// serverUser returns the OS user PostgreSQL must run as: nil when the test
// binary is not root, else the "postgres" user (PostgreSQL refuses to run
// as root).
func serverUser() (*osUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, but PostgreSQL refuses to run as root and there is no OS user \"postgres\" to run it as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("user postgres: %w", err)
	}
	ou := &osUser{name: u.Username, uid: uint32(uid), gid: uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				ou.groups = append(ou.groups, uint32(g))
			}
		}
	}
	return ou, nil
}

// reachable reports whether u can traverse dir and all its parents
// (conservatively: by owner or by the "other" bits).
func reachable(dir string, u *osUser) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return false
		}
		mode := fi.Mode().Perm()
		if !(st.Uid == u.uid && mode&0o100 != 0) && mode&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

// procsSupported says whether this system can run the harness's servers.
const procsSupported = true
