// Command node is the ratesync limiter node: a process that holds a
// ratelimiting.Instance configured from a YAML file, serves its decisions
// over an HTTP JSON API (/v1/check, /v1/increment, /v1/window), reports
// health and Prometheus metrics, optionally rate-limits a reverse proxy
// (gateway mode), reloads its configuration on SIGHUP and when its files
// change (reload.go), and on SIGINT or SIGTERM drains requests and makes a
// final sync of every namespace before it exits.
//
//	go build -o ratesync-node ./cmd/node
//	./ratesync-node                          # local namespace "default", 127.0.0.1:8080
//	./ratesync-node -config examples/node-local.yaml -listen 127.0.0.1:9090 -log-format json
//
// The configuration is read in one place (config.go): flags, then the file,
// then the environment for secrets (RATESYNC_REDIS_URL,
// RATESYNC_POSTGRES_URL, RATESYNC_ADMIN_TOKEN). The node owns the process:
// configuration, HTTP, metrics, shutdown. Counting, syncing and the stores
// are the library's; headers and key selection are the middleware's.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal ends the process at once
	}()
	if err := run(ctx, os.Args[1:], os.Environ()); err != nil {
		if !errors.As(err, new(loggedError)) { // an error before the log exists: the configuration's
			fmt.Fprintln(os.Stderr, "ratesync-node:", err)
		}
		os.Exit(1)
	}
}
