// Command httpload puts closed-loop HTTP/1.1 load on a running server and
// prints requests/s, p50, p90, p99 and the answers' status codes. It
// starts nothing: point it at the node's API or gateway, at the floors of
// bench/httpfloor, or at any other server. Each of -c keep-alive
// connections has one request in flight; {key} in the URL's path, the
// headers and the body becomes a key number from 0 to -keys - 1, drawn
// uniformly or in turn (-order). TestHTTPSuite in bench/ runs the same
// driver (internal/httpload) against the processes it starts (see
// bench/README.md).
//
//	go run ./bench/httpload -url http://127.0.0.1:8080/v1/check -c 32 -keys 10000 -d 10s \
//	    -body '{"namespace":"default","key":"user:{key}","limits":[{"limit":1e9,"window":"1m"}]}'
//	go run ./bench/httpload -url http://127.0.0.1:8000/ -H 'X-Consumer-ID: user:{key}' -keys 10000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/ratesync/ratesync/internal/httpload"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "httpload: ") { // the driver's errors say it already
			msg = "httpload: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
}

// headers is a repeatable -H flag.
type headers http.Header

func (h headers) String() string { return fmt.Sprint(http.Header(h)) }

func (h headers) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	if !ok {
		return fmt.Errorf("%q: want Name: value", s)
	}
	http.Header(h).Add(strings.TrimSpace(name), strings.TrimSpace(value))
	return nil
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("httpload", flag.ContinueOnError)
	cfg := httpload.Config{Header: http.Header{}}
	target := fs.String("url", "http://127.0.0.1:8080/", "the requests' `URL`: http://host:port/path")
	fs.StringVar(&cfg.Method, "X", "", "method (default GET, or POST with -body)")
	fs.Var(headers(cfg.Header), "H", "a header, `Name: value`; repeat for more")
	fs.StringVar(&cfg.Body, "body", "", "the request body")
	fs.IntVar(&cfg.Keys, "keys", 1, "distinct requests: {key} in the path, headers and body becomes 0 to keys-1")
	order := fs.String("order", "uniform", "how each connection picks its next key: uniform or round-robin")
	fs.IntVar(&cfg.Conns, "c", 32, "keep-alive connections, each waiting for its answer before its next request")
	fs.IntVar(&cfg.Requests, "n", 0, "stop after this many requests (0: -d alone)")
	fs.DurationVar(&cfg.Duration, "d", 10*time.Second, "stop after this long (0: -n alone)")
	fs.DurationVar(&cfg.Timeout, "timeout", 5*time.Second, "per request")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the uniform key draws")
	warm := fs.Duration("warmup", time.Second, "unmeasured load first, on the same connections")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.Requests == 0 && cfg.Duration == 0 {
		return errors.New("-n and -d are both 0: the run needs a bound")
	}
	rest, ok := strings.CutPrefix(*target, "http://")
	host, path, _ := strings.Cut(rest, "/")
	if !ok || host == "" {
		return fmt.Errorf("-url %q: want http://host[:port]/path (plain HTTP/1.1 only)", *target)
	}
	if !strings.Contains(host, ":") {
		host += ":80"
	}
	cfg.Target, cfg.Path = host, "/"+path
	var err error
	if cfg.Order, err = httpload.ParseOrder(*order); err != nil {
		return err
	}
	d, err := httpload.New(cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *warm > 0 {
		if _, err := d.Warm(ctx, *warm); err != nil {
			return err
		}
	}
	res, err := d.Run(ctx)
	if err != nil {
		return err
	}
	c := d.Config()
	if _, err := fmt.Fprintf(out, "%s %s%s: %d connections, %d key(s), %s: %s\n", c.Method, c.Target, c.Path, c.Conns, c.Keys, c.Order, res); err != nil {
		return err
	}
	if res.Errors > 0 && res.Errors == res.Requests {
		return fmt.Errorf("every request failed: %v", res.FirstErr)
	}
	return nil
}
