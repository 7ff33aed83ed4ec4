package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ratesync/ratesync/internal/gcfloor"
)

// run is the whole process but for SIGINT, SIGTERM and the exit code: read
// the configuration, log it (secrets masked), build the node and serve
// until ctx is done, reloading the configuration on SIGHUP and when its
// files change. env is the environment as os.Environ gives it; logs go to
// stderr, and so do the store clients' own lines (go-redis's, pgx's). A
// nil error means a clean stop: every namespace's final sync succeeded. An
// error once the logger exists is logged too (a loggedError).
func run(ctx context.Context, args, env []string) error {
	return runWithLog(ctx, args, env, os.Stderr)
}

// runWithLog is run with the log written to stderr (tests capture it).
func runWithLog(ctx context.Context, args, env []string, stderr io.Writer) error {
	// A SIGHUP during the start is kept for the node to reload once serving.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	getenv := func(name string) string {
		for _, kv := range env {
			if k, v, ok := strings.Cut(kv, "="); ok && k == name {
				return v
			}
		}
		return ""
	}
	cfg, err := loadConfig(args, getenv, stderr)
	if errors.Is(err, errHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log, logCtl := newLogger(cfg, stderr)
	routeRedisLog(log)
	eff, _ := json.Marshal(cfg.Masked())
	log.Info("ratesync node starting", "config", string(eff))
	if cfg.Node.adminTokenFrom != "" {
		log.Info("admin token set", "from", cfg.Node.adminTokenFrom)
	}
	setFloor := heapFloor(getenv, log)
	setFloor(cfg.Node.GCHeapFloor)
	n, err := newNode(ctx, cfg, log)
	if err != nil {
		return logExit(log, "ratesync node cannot start", redactErr(err, cfg))
	}
	n.heapFloor = setFloor
	if addr := cfg.Node.pprofListen; addr != "" {
		bound, stop, err := servePprof(ctx, addr)
		if err != nil {
			return logExit(log, "ratesync node cannot start", err)
		}
		defer stop()
		log.Info("profiler listening", "url", "http://"+bound+"/debug/pprof/")
	}
	n.load = func() (Config, error) { return loadConfig(args, getenv, io.Discard) }
	n.logCtl, n.hup = logCtl, hup
	err = n.Serve(ctx)
	// Serve has closed the store clients; go-redis may still log from a
	// dial it had under way, a line that would follow the node's last one.
	redisLog.Store(nil)
	return logExit(log, "ratesync node stopped with an error", redactErr(err, cfg))
}

// gcTuner keeps the process's heap goal at node.gc_heap_floor: one for
// the process, whatever the nodes in it (tests run several; the last
// floor set holds).
var gcTuner = sync.OnceValue(func() *gcfloor.Tuner { return gcfloor.Start(0) })

// heapFloor returns what sets node.gc_heap_floor for the process: the
// tuner's Set, or, with GOGC in the environment, nothing (that GOGC
// stands alone, as the operator set it).
func heapFloor(getenv func(string) string, log *slog.Logger) func(int64) {
	if v := getenv("GOGC"); v != "" {
		log.Info("node.gc_heap_floor not applied: GOGC is set", "GOGC", v)
		return func(int64) {}
	}
	return gcTuner().Set
}

// servePprof serves Go's profiler (net/http/pprof's /debug/pprof/) on addr
// until ctx is done or stop is called, and returns the address it
// listens on: a separate listener, so that the
// API's routes and middleware are not involved, and profiles are taken of
// the node as it runs.
func servePprof(ctx context.Context, addr string) (bound string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("-pprof-listen %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return ln.Addr().String(), cancel, nil
}

// loggedError is an error the node's log has reported: main prints
// nothing more, so that every line of a JSON log is JSON.
type loggedError struct{ err error }

func (e loggedError) Error() string { return e.err.Error() }
func (e loggedError) Unwrap() error { return e.err }

// logExit logs err, if any, at ERROR with msg and returns it marked as
// logged.
func logExit(log *slog.Logger, msg string, err error) error {
	if err == nil {
		return nil
	}
	log.Error(msg, "err", err)
	return loggedError{err}
}

// redactErr masks the secrets of cfg in err's text.
func redactErr(err error, cfg Config) error {
	if err == nil {
		return nil
	}
	s := err.Error()
	for _, sec := range secretsOf(cfg) {
		s = strings.ReplaceAll(s, sec, "xxxxx")
	}
	if s == err.Error() {
		return err
	}
	return errors.New(s)
}

// logControl is what a reload changes in the node's logger: its level,
// and the secrets it masks (those of every configuration applied so far).
type logControl struct {
	level   slog.LevelVar
	secrets atomic.Pointer[[]string]
}

// set applies cfg's level and adds its secrets.
func (lc *logControl) set(cfg Config) {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Node.LogLevel))
	lc.level.Set(level)
	var secrets []string
	if old := lc.secrets.Load(); old != nil {
		secrets = slices.Clone(*old)
	}
	for _, s := range secretsOf(cfg) {
		if !slices.Contains(secrets, s) {
			secrets = append(secrets, s)
		}
	}
	lc.secrets.Store(&secrets)
}

// newLogger returns the node's logger: text or JSON on w, at the configured
// level, with every secret of cfg masked in every attribute, and what
// changes its level and secrets on a reload.
func newLogger(cfg Config, w io.Writer) (*slog.Logger, *logControl) {
	lc := &logControl{}
	lc.set(cfg)
	mask := func(s string) (string, bool) {
		changed := false
		for _, sec := range *lc.secrets.Load() {
			if strings.Contains(s, sec) {
				s, changed = strings.ReplaceAll(s, sec, "xxxxx"), true
			}
		}
		return s, changed
	}
	opts := &slog.HandlerOptions{Level: &lc.level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if len(*lc.secrets.Load()) == 0 {
			return a
		}
		switch a.Value.Kind() {
		case slog.KindString:
			if s, ok := mask(a.Value.String()); ok {
				a.Value = slog.StringValue(s)
			}
		case slog.KindAny:
			if err, isErr := a.Value.Any().(error); isErr && err != nil {
				if s, ok := mask(err.Error()); ok {
					a.Value = slog.StringValue(s)
				}
			}
		}
		return a
	}}
	if cfg.Node.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), lc
	}
	return slog.New(slog.NewTextHandler(w, opts)), lc
}
