package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// This file holds the processes the harness starts and what they need: free
// ports, readiness polling, temporary directories and log tails. The
// operating-system parts (signals, process groups) are in proc_unix.go and
// spawn_*.go; the state machine of a server (Start, Stop, Pause, Resume) in
// server.go.

// How long the harness waits for things that should be quick.
const (
	readyTimeout  = 60 * time.Second // a server answers after start
	stopGrace     = 15 * time.Second // a graceful stop, before SIGKILL
	signalTimeout = 10 * time.Second // a killed process exits, a paused one stops
)

// osUser is the OS user a server runs as when it is not the test binary's.
type osUser struct {
	name   string
	uid    uint32
	gid    uint32
	groups []uint32
}

// procSpec says how to start a process.
type procSpec struct {
	name string   // for messages, e.g. "redis-server"
	path string   // binary
	args []string // arguments, without the binary
	dir  string   // working directory
	log  string   // file the output is appended to; empty: discarded
	user *osUser  // nil: the test binary's user
}

// proc is one process the harness started. done is closed once it has
// exited and been reaped; err (valid after done) says how it exited. The
// fields are written by startProc and the waiting goroutine only.
type proc struct {
	spec procSpec
	pid  int
	done chan struct{}
	err  error
}

// exited reports whether p has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to d for p to exit.
func (p *proc) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// run starts spec and waits up to d for it to exit successfully.
func run(spec procSpec, d time.Duration) error {
	p, err := startProc(spec)
	if err != nil {
		return err
	}
	if !p.wait(d) {
		_ = p.kill()
		return fmt.Errorf("%s did not finish within %v%s", spec.name, d, formatTail(spec.log, logTail(spec.log)))
	}
	if p.err != nil {
		return fmt.Errorf("%s: %w%s", spec.name, p.err, formatTail(spec.log, logTail(spec.log)))
	}
	return nil
}

// poll calls check until it succeeds, p exits or ctx ends; the pause
// between calls grows from 5 ms to 200 ms.
func (p *proc) poll(ctx context.Context, check func(context.Context) error) error {
	delay := 5 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited (%v); last check: %v", p.err, err)
		case <-ctx.Done():
			return fmt.Errorf("%w; last check: %v", ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// pollUntil calls check until it succeeds or d has passed, and returns
// check's last error.
func pollUntil(d time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	delay := 5 * time.Millisecond
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		err := check(cctx)
		ccancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// Ports handed out by this process, never handed out twice: a stopped
// server keeps its port for its next start.
var ports struct {
	sync.Mutex
	used map[int]bool
}

// freePort returns a loopback TCP port that is free now, and free+offset
// too when offset > 0 (Redis Cluster's bus port).
func freePort(offset int) (int, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.used == nil {
		ports.used = map[int]bool{}
	}
	var last error
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if offset > 0 {
			if port+offset > 65535 {
				_ = l.Close()
				continue
			}
			l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+offset))
			if err != nil {
				_ = l.Close()
				last = err
				continue
			}
			_ = l2.Close()
		}
		_ = l.Close()
		if ports.used[port] || (offset > 0 && ports.used[port+offset]) {
			continue
		}
		ports.used[port] = true
		if offset > 0 {
			ports.used[port+offset] = true
		}
		return port, nil
	}
	return 0, fmt.Errorf("find a free port (and port+%d): none after 100 tries (%v)", offset, last)
}

// tempPrefix starts the name of every temporary directory the harness
// makes; the test binary's pid follows, so later runs can remove what a
// killed binary left behind.
const tempPrefix = "ratesync-testenv-"

var sweepOnce sync.Once

// tempRoot makes a temporary directory for a server of kind, owned by
// owner (nil: the current user), in a place owner can reach.
func tempRoot(kind string, owner *osUser) (string, error) {
	sweepOnce.Do(sweepStale)
	base := os.TempDir()
	if owner != nil && !reachable(base, owner) {
		if !reachable("/tmp", owner) {
			return "", fmt.Errorf("no temporary directory that user %s can reach (tried %s and /tmp); set TMPDIR", owner.name, base)
		}
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-%s-", tempPrefix, os.Getpid(), kind))
	if err != nil {
		return "", fmt.Errorf("make temporary directory: %w", err)
	}
	if owner != nil {
		if err := os.Chown(dir, int(owner.uid), int(owner.gid)); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("give %s to user %s: %w", dir, owner.name, err)
		}
	}
	return dir, nil
}

// sweepStale removes the temporary directories of test binaries that are
// gone (killed before they could clean up).
func sweepStale() {
	for _, base := range []string{os.TempDir(), "/tmp"} {
		matches, _ := filepath.Glob(filepath.Join(base, tempPrefix+"*"))
		for _, m := range matches {
			rest := strings.TrimPrefix(filepath.Base(m), tempPrefix)
			pidText, _, ok := strings.Cut(rest, "-")
			pid, err := strconv.Atoi(pidText)
			if !ok || err != nil || pid == os.Getpid() || pidExists(pid) {
				continue
			}
			_ = os.RemoveAll(m)
		}
	}
}

// logTail returns the last lines of the log at path.
func logTail(path string) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 4096
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		_, _ = f.Seek(fi.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// formatTail formats a log tail for the end of an error message.
func formatTail(path, tail string) string {
	if tail == "" {
		return ""
	}
	return "\n--- last lines of " + path + " ---\n" + tail + "\n---"
}
