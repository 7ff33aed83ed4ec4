//go:build unix

package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// Processes are started in their own process group (so that the group can
// be signalled without touching the test binary) and, on Linux, with a
// parent-death signal, so that they die with the test binary even when
// nothing stops them. PostgreSQL backends put themselves in sessions of
// their own, so the harness signals a server's descendants one by one, found
// in the process table.

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

// stop sends sig to p and waits up to grace for it and its descendants to
// exit; then it kills them.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) error {
	if p.exited() {
		return p.resume()
	}
	kids := descendants(p.pid)
	if err := p.resume(); err != nil {
		return err
	}
	_ = syscall.Kill(p.pid, sig)
	if !p.wait(grace) {
		err := p.kill()
		return errors.Join(fmt.Errorf("%s did not exit within %v of %v; killed", p.spec.name, grace, sig), err)
	}
	return waitGone(kids)
}

// kill kills p, its process group and its descendants with SIGKILL and
// waits until they are gone.
func (p *proc) kill() error {
	defer p.dropWatchdog()
	kids := p.stopped
	p.stopped = nil
	if p.exited() {
		// Its pid may belong to another process now: signal nothing by it.
		return waitGone(kids)
	}
	// Stop p first so that it forks no child that the kill would miss.
	_ = syscall.Kill(p.pid, syscall.SIGSTOP)
	_ = waitStopped([]int{p.pid})
	kids = append(descendants(p.pid), kids...)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	if !p.wait(goneTimeout) {
		return fmt.Errorf("%s (pid %d) still running %v after SIGKILL", p.spec.name, p.pid, goneTimeout)
	}
	return waitGone(kids)
}

// pause stops p and all its descendants with SIGSTOP. If p has
// descendants (PostgreSQL's backends), a watchdog process continues and
// kills them should the test binary die while they are stopped; nothing
// else would, since they live in sessions of their own.
func (p *proc) pause() error {
	if err := syscall.Kill(p.pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP %s (pid %d): %w", p.spec.name, p.pid, err)
	}
	// Once p is stopped it forks no more; stop what it forked before.
	if err := waitStopped([]int{p.pid}); err != nil {
		return err
	}
	for range 10 {
		kids := descendants(p.pid)
		var running []int
		for _, k := range kids {
			if !slices.Contains(p.stopped, k) {
				p.stopped = append(p.stopped, k)
			}
			if st, ok := procState(k); ok && !isStopped(st) {
				running = append(running, k)
				_ = syscall.Kill(k, syscall.SIGSTOP)
			}
		}
		if len(running) == 0 {
			break
		}
		if err := waitStopped(running); err != nil {
			return err
		}
	}
	if len(p.stopped) > 0 {
		w, err := startWatchdog(append([]int{p.pid}, p.stopped...))
		if err != nil {
			return err
		}
		p.watchdog = w
	}
	return nil
}

// resume continues p and the descendants pause stopped.
func (p *proc) resume() error {
	defer p.dropWatchdog()
	kids := p.stopped
	p.stopped = nil
	if p.exited() {
		for _, k := range kids {
			_ = syscall.Kill(k, syscall.SIGCONT)
		}
		return nil
	}
	if err := syscall.Kill(p.pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGCONT %s (pid %d): %w", p.spec.name, p.pid, err)
	}
	for _, k := range append(descendants(p.pid), kids...) {
		_ = syscall.Kill(k, syscall.SIGCONT)
	}
	return nil
}

func (p *proc) dropWatchdog() {
	if w := p.watchdog; w != nil {
		p.watchdog = nil
		_ = syscall.Kill(-w.pid, syscall.SIGKILL)
		w.wait(goneTimeout)
	}
}

// watchdogScript continues and kills the processes given as arguments when
// it gets SIGTERM (the parent-death signal, on Linux) or sees its parent,
// the test binary, gone.
const watchdogScript = `revive() { kill -CONT "$@" 2>/dev/null; kill -KILL "$@" 2>/dev/null; exit 0; }
trap 'revive "$@"' TERM
while kill -0 "$PPID" 2>/dev/null; do sleep 1 & wait $!; done
revive "$@"`

func startWatchdog(pids []int) (*proc, error) {
	args := []string{"-c", watchdogScript, "testenv-watchdog"}
	for _, pid := range pids {
		args = append(args, strconv.Itoa(pid))
	}
	return startProc(procSpec{name: "watchdog", path: "/bin/sh", args: args, watchdog: true})
}

// waitStopped waits until every process of pids is stopped (or gone).
func waitStopped(pids []int) error {
	deadline := time.Now().Add(goneTimeout)
	for {
		var left []int
		for _, pid := range pids {
			if st, ok := procState(pid); ok && !isStopped(st) && !isDead(st) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v not stopped %v after SIGSTOP", left, goneTimeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitGone waits until no process of pids is alive; zombies count as
// gone, since whoever adopted them may not reap them.
func waitGone(pids []int) error {
	deadline := time.Now().Add(goneTimeout)
	for {
		var left []int
		for _, pid := range pids {
			if st, ok := procState(pid); ok && !isDead(st) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still alive %v after their server exited", left, goneTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func isStopped(state byte) bool { return state == 'T' || state == 't' }
func isDead(state byte) bool    { return state == 'Z' || state == 'X' }

// psEntry is one row of the process table.
type psEntry struct {
	pid, ppid int
	state     byte // as ps shows it: R, S, T (stopped), Z (zombie)...
}

// descendants returns the live descendants of pid.
func descendants(pid int) []int {
	table := processTable()
	var out []int
	frontier := []int{pid}
	for len(frontier) > 0 {
		parent := frontier[0]
		frontier = frontier[1:]
		for _, e := range table {
			if e.ppid == parent && !isDead(e.state) {
				out = append(out, e.pid)
				frontier = append(frontier, e.pid)
			}
		}
	}
	return out
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
