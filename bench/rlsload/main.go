// Command rlsload puts closed-loop load on a running Envoy rate limit
// service (ShouldRateLimit over gRPC) and prints decisions/s, p50, p99 and
// the answers' codes. It starts nothing: point it at the node's rls listen
// address, or at any other implementation. Every request carries one
// descriptor (-domain, -key) whose value is drawn from -keys values
// ("k0", "k1", ...); the service's configuration decides what they count
// against. TestRLSSuite in bench/ runs the same driver against the
// services it starts (see bench/README.md).
//
//	go run ./bench/rlsload -addr 127.0.0.1:8081 -c 64 -keys 10000 -d 10s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/ratesync/ratesync/internal/rlsload"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("rlsload", flag.ContinueOnError)
	var cfg rlsload.Config
	fs.StringVar(&cfg.Target, "addr", "127.0.0.1:8081", "the service's gRPC `address`")
	fs.IntVar(&cfg.Workers, "c", 16, "concurrent workers, each waiting for its answer before its next request")
	fs.IntVar(&cfg.Conns, "conns", 2, "gRPC connections the workers share (Envoy opens one per worker thread)")
	fs.IntVar(&cfg.Requests, "n", 0, "stop after this many requests (0: -d alone)")
	fs.DurationVar(&cfg.Duration, "d", 10*time.Second, "stop after this long (0: -n alone)")
	fs.IntVar(&cfg.Keys, "keys", 1, "distinct descriptor values, drawn uniformly")
	fs.StringVar(&cfg.Domain, "domain", "bench", "the requests' domain")
	fs.StringVar(&cfg.Key, "key", "key", "the descriptor entry's key")
	fs.DurationVar(&cfg.Timeout, "timeout", 5*time.Second, "per request")
	warm := fs.Duration("warmup", time.Second, "unmeasured load first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.Requests == 0 && cfg.Duration == 0 {
		return errors.New("-n and -d are both 0: the run needs a bound")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *warm > 0 {
		w := cfg
		w.Requests, w.Duration = 0, *warm
		if err := once(ctx, w, nil); err != nil {
			return err
		}
	}
	return once(ctx, cfg, out)
}

// once runs cfg, and prints the result to out unless it is nil.
func once(ctx context.Context, cfg rlsload.Config, out io.Writer) error {
	d, err := rlsload.New(cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	res, err := d.Run(ctx)
	if err != nil {
		return err
	}
	if out != nil {
		c := d.Config()
		_, err = fmt.Fprintf(out, "%s: %d workers on %d connection(s), %d key(s): %s\n", c.Target, c.Workers, c.Conns, c.Keys, res)
	}
	if res.Errors > 0 && res.OK+res.Over == 0 {
		return fmt.Errorf("every request failed: %v", res.FirstErr)
	}
	return err
}
