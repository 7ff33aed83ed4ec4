package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
)

// run is the whole process but for signals and the exit code: read the
// configuration, log it (secrets masked), build the node and serve until
// ctx is done. env is the environment as os.Environ gives it; logs go to
// stderr. A nil error means a clean stop: every namespace's final sync
// succeeded.
func run(ctx context.Context, args, env []string) error {
	return runWithLog(ctx, args, env, os.Stderr)
}

// runWithLog is run with the log written to stderr (tests capture it).
func runWithLog(ctx context.Context, args, env []string, stderr io.Writer) error {
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
	log := newLogger(cfg, stderr)
	eff, _ := json.Marshal(cfg.Masked())
	log.Info("ratesync node starting", "config", string(eff))
	if cfg.Node.adminTokenFrom != "" {
		log.Info("admin token set", "from", cfg.Node.adminTokenFrom)
	}
	n, err := newNode(ctx, cfg, log)
	if err != nil {
		return redactErr(err, cfg)
	}
	return redactErr(n.Serve(ctx), cfg)
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

// newLogger returns the node's logger: text or JSON on w, at the configured
// level, with every secret of cfg masked in every attribute.
func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Node.LogLevel))
	secrets := secretsOf(cfg)
	mask := func(s string) (string, bool) {
		changed := false
		for _, sec := range secrets {
			if strings.Contains(s, sec) {
				s, changed = strings.ReplaceAll(s, sec, "xxxxx"), true
			}
		}
		return s, changed
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if len(secrets) == 0 {
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
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
