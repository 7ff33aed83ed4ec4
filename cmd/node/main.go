// Command node is the ratesync limiter node: a process that holds a
// ratelimiting.Instance configured from a YAML file, serves its decisions
// over an HTTP JSON API (/v1/check, /v1/increment, /v1/window), reports
// health and Prometheus metrics, optionally rate-limits a reverse proxy
// (gateway mode), serves Envoy's rate limit service, reloads its
// configuration on SIGHUP and when its files change, and on SIGINT or
// SIGTERM drains requests and makes a final sync of every namespace before
// it exits.
//
//	go build -o ratesync-node ./cmd/node
//	./ratesync-node                          # local namespace "default", 127.0.0.1:8080
//	./ratesync-node -config examples/node-local.yaml -listen 127.0.0.1:9090 -log-format json
//
// The configuration is read in one place (internal/node/config): flags,
// then the file, then the environment for secrets (RATESYNC_REDIS_URL,
// RATESYNC_POSTGRES_URL, RATESYNC_ADMIN_TOKEN). The node itself (HTTP,
// gateway, rate limit service, metrics, reload, shutdown) is internal/node;
// this command reads the configuration, runs the node, and turns signals
// and errors into the process's exit. Counting, syncing and the stores are
// the library's; headers and key selection are the middleware's.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ratesync/ratesync/internal/node"
	"github.com/ratesync/ratesync/internal/node/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal ends the process at once
	}()
	if err := run(ctx, os.Args[1:], os.Environ()); err != nil {
		if errors.As(err, new(configError)) { // before the log exists: the node logs its own
			fmt.Fprintln(os.Stderr, "ratesync-node:", err)
		}
		os.Exit(1)
	}
}

// run is the whole process but for SIGINT, SIGTERM and the exit code:
// read the configuration from args and env (as os.Environ gives it) and
// run the node until ctx is done. A nil error means a clean stop (or -h).
func run(ctx context.Context, args, env []string) error {
	return runWithLog(ctx, args, env, os.Stderr)
}

// runWithLog is run with the usage and the log written to stderr (tests
// capture it).
func runWithLog(ctx context.Context, args, env []string, stderr io.Writer) error {
	// A SIGHUP while the configuration is read does not end the process:
	// the node reloads once it serves, and on the ones that follow.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cfg, err := config.Load(args, getenv(env), stderr)
	if errors.Is(err, config.ErrHelp) {
		return nil
	}
	if err != nil {
		return configError{err}
	}
	return node.RunWithLog(ctx, cfg, stderr, hup)
}

// getenv returns a lookup in env, a list of name=value.
func getenv(env []string) func(string) string {
	return func(name string) string {
		for _, kv := range env {
			if k, v, ok := strings.Cut(kv, "="); ok && k == name {
				return v
			}
		}
		return ""
	}
}

// configError is a configuration that does not load: main prints it, as
// the node's log does not exist yet. Every other error the node has
// logged, so that every line of a JSON log is JSON.
type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }
func (e configError) Unwrap() error { return e.err }
