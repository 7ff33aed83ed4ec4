//go:build !unix

package testenv

import (
	"errors"
	"runtime"
	"syscall"
	"time"
)

// Without Unix signals and process groups the harness starts no local
// servers: tests use RATESYNC_TEST_*_URL or Docker, or are skipped.

var errNoProcs = errors.New("testenv: starting local servers is not supported on " + runtime.GOOS)

func startProc(procSpec) (*proc, error)                  { return nil, errNoProcs }
func (p *proc) stop(syscall.Signal, time.Duration) error { return errNoProcs }
func (p *proc) kill() error                              { return errNoProcs }
func (p *proc) pause() error                             { return errNoProcs }
func (p *proc) resume() error                            { return errNoProcs }
func pidExists(int) bool                                 { return true }
func serverUser() (*osUser, error)                       { return nil, errNoProcs }
func reachable(string, *osUser) bool                     { return true }

// procsSupported says whether this system can run the harness's servers.
const procsSupported = false
