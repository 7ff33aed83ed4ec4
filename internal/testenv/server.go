package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// server is a server process the harness started and may stop and start
// again with the same command line (same port, same data directory). Its
// methods are safe for concurrent use.
type server struct {
	kind    string         // "Redis", "PostgreSQL": for messages
	addr    string         // 127.0.0.1:port it listens on
	spec    procSpec       // how to start it
	stopSig syscall.Signal // graceful stop signal
	ready   func(ctx context.Context) error
	root    string // temporary directory, removed by close

	mu     sync.Mutex
	p      *proc // nil while stopped
	paused bool
	closed bool
}

// errBusyPort reports that a server could not bind its port; the caller
// may retry on another one.
var errBusyPort = errors.New("port already in use")

// start starts s and waits until it answers.
func (s *server) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("%s %s: already shut down", s.kind, s.addr)
	}
	if s.p != nil {
		return fmt.Errorf("%s %s: already running", s.kind, s.addr)
	}
	p, err := startProc(s.spec)
	if err != nil {
		return fmt.Errorf("start %s %s: %w", s.kind, s.addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := p.poll(ctx, s.ready); err != nil {
		_ = p.kill()
		tail := logTail(s.spec.log)
		if strings.Contains(tail, "already in use") {
			err = fmt.Errorf("%w: %v", errBusyPort, err)
		}
		return fmt.Errorf("%s %s did not become ready: %w%s", s.kind, s.addr, err, formatTail(s.spec.log, tail))
	}
	s.p, s.paused = p, false
	return nil
}

// stop stops s with its stop signal, and SIGKILL if it is not gone after a
// grace period. Stopping a stopped server does nothing.
func (s *server) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

func (s *server) stopLocked() error {
	p := s.p
	if p == nil {
		return nil
	}
	s.p, s.paused = nil, false
	if err := p.stop(s.stopSig, stopGrace); err != nil {
		return fmt.Errorf("stop %s %s: %w%s", s.kind, s.addr, err, formatTail(s.spec.log, logTail(s.spec.log)))
	}
	return nil
}

// pause stops s's process group with SIGSTOP, so that it accepts no work and
// answers nothing. Pausing a paused server does nothing.
func (s *server) pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.p == nil:
		return fmt.Errorf("pause %s %s: not running", s.kind, s.addr)
	case s.paused:
		return nil
	}
	if err := s.p.pause(); err != nil {
		_ = s.p.resume()
		return fmt.Errorf("pause %s %s: %w", s.kind, s.addr, err)
	}
	s.paused = true
	return nil
}

// resume continues a paused server. Resuming a running server does nothing.
func (s *server) resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.p == nil:
		return fmt.Errorf("resume %s %s: not running", s.kind, s.addr)
	case !s.paused:
		return nil
	}
	s.paused = false
	if err := s.p.resume(); err != nil {
		return fmt.Errorf("resume %s %s: %w", s.kind, s.addr, err)
	}
	return nil
}

// close stops s for good, paused or not, and removes its directory.
func (s *server) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.stopLocked()
	if s.root != "" {
		if rerr := os.RemoveAll(s.root); rerr != nil && err == nil {
			err = fmt.Errorf("remove %s: %w", s.root, rerr)
		}
	}
	return err
}

// closeAtCleanup closes s when t ends; if t failed, it logs s's output
// first.
func (s *server) closeAtCleanup(t testing.TB) {
	t.Cleanup(func() {
		if t.Failed() {
			if tail := logTail(s.spec.log); tail != "" {
				t.Logf("testenv: %s %s output:%s", s.kind, s.addr, formatTail(s.spec.log, tail))
			}
		}
		if err := s.close(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
}
