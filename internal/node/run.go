package node

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
	"github.com/ratesync/ratesync/internal/node/config"
)

// Run is the whole node but for reading its configuration, SIGINT,
// SIGTERM and the exit code: it logs cfg (secrets masked), builds the node
// and serves until ctx is done, reloading the configuration (cfg.Reload)
// on SIGHUP and when its files change. Logs go to stderr, and so do the
// store clients' own lines (go-redis's, pgx's). A nil error means a clean
// stop: every namespace's final sync succeeded. Every error it returns has
// been logged.
func Run(ctx context.Context, cfg config.Config) error {
	return RunWithLog(ctx, cfg, os.Stderr, nil)
}

// RunWithLog is Run with the log written to stderr (tests capture it). hup,
// when not nil, is where the caller has SIGHUP delivered since before it
// read cfg: a signal caught while it read is a reload once the node
// serves. When nil, the node asks for SIGHUP itself.
func RunWithLog(ctx context.Context, cfg config.Config, stderr io.Writer, hup chan os.Signal) error {
	if hup == nil {
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	log, logCtl := newLogger(cfg, stderr)
	routeRedisLog(log)
	eff, _ := json.Marshal(cfg.Masked())
	log.Info("ratesync node starting", "config", string(eff))
	if cfg.Node.AdminTokenFrom != "" {
		log.Info("admin token set", "from", cfg.Node.AdminTokenFrom)
	}
	setFloor := heapFloor(cfg.Getenv, log)
	setFloor(cfg.Node.GCHeapFloor)
	n, err := newNode(ctx, cfg, log)
	if err != nil {
		return logExit(log, "ratesync node cannot start", redactErr(err, cfg))
	}
	n.heapFloor = setFloor
	if addr := cfg.Node.PprofListen; addr != "" {
		bound, stop, err := servePprof(ctx, addr)
		if err != nil {
			return logExit(log, "ratesync node cannot start", err)
		}
		defer stop()
		log.Info("profiler listening", "url", "http://"+bound+"/debug/pprof/")
	}
	n.load = cfg.Reload
	n.logCtl, n.hup = logCtl, hup
	err = n.Serve(ctx)
	// Serve has closed the store clients; go-redis may still log from a
	// dial it had under way, a line that would follow the node's last one.
	setRedisLog(nil)
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

// logExit logs err, if any, at ERROR with msg and returns it.
func logExit(log *slog.Logger, msg string, err error) error {
	if err == nil {
		return nil
	}
	log.Error(msg, "err", err)
	return err
}

// redactErr masks the secrets of cfg in err's text.
func redactErr(err error, cfg config.Config) error {
	if err == nil {
		return nil
	}
	s := err.Error()
	for _, sec := range cfg.Secrets() {
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
func (lc *logControl) set(cfg config.Config) {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Node.LogLevel))
	lc.level.Set(level)
	var secrets []string
	if old := lc.secrets.Load(); old != nil {
		secrets = slices.Clone(*old)
	}
	for _, s := range cfg.Secrets() {
		if !slices.Contains(secrets, s) {
			secrets = append(secrets, s)
		}
	}
	lc.secrets.Store(&secrets)
}

// newLogger returns the node's logger: text or JSON on w, at the configured
// level, with every secret of cfg masked in every attribute, and what
// changes its level and secrets on a reload.
func newLogger(cfg config.Config, w io.Writer) (*slog.Logger, *logControl) {
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
