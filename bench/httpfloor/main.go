// Command httpfloor serves the baselines the node's HTTP paths are
// measured against, each in a process of its own as the node is:
//
//   - floor: a plain net/http handler that decodes a /v1/check body (the
//     same fields as the node's) and answers 200 with a small JSON body,
//     the least any JSON endpoint does;
//   - upstream: answers every request 200 with a small body, the upstream
//     of a gateway;
//   - proxy: a bare httputil.ReverseProxy to -upstream, with the
//     transport and server settings of the node's gateway, so that the
//     gateway's rate limiting is what the comparison isolates.
//
// The floor and upstream servers have the timeouts of the node's API
// server. It prints "httpfloor: MODE listening on http://ADDR" on stderr
// when it serves, and stops on SIGINT or SIGTERM. TestHTTPSuite in bench/
// starts it (see bench/README.md).
//
//	go run ./bench/httpfloor -mode floor -listen 127.0.0.1:8090
//	go run ./bench/httpfloor -mode proxy -listen 127.0.0.1:8091 -upstream http://127.0.0.1:9000
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "httpfloor:", err)
		os.Exit(1)
	}
}

// The node's server settings (internal/node/node.go): its API server's
// timeouts, and the gateway's, whose reads and writes are bounded by the
// upstream exchange (connect_timeout + 2 × timeout, at their defaults).
const (
	readHeaderTimeout = 5 * time.Second
	apiReadTimeout    = 10 * time.Second
	apiWriteTimeout   = 10 * time.Second
	idleTimeout       = 60 * time.Second
	connectTimeout    = 5 * time.Second  // gateway.connect_timeout's default
	upstreamTimeout   = 30 * time.Second // gateway.timeout's default
	exchangeTimeout   = connectTimeout + 2*upstreamTimeout
)

func run(ctx context.Context, args []string, logw io.Writer) error {
	fs := flag.NewFlagSet("httpfloor", flag.ContinueOnError)
	fs.SetOutput(logw)
	mode := fs.String("mode", "floor", "what to serve: floor, upstream or proxy")
	listen := fs.String("listen", "127.0.0.1:0", "listen `address`")
	upstream := fs.String("upstream", "", "proxy: the upstream's `URL` (http://host:port)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	srv := &http.Server{ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: apiReadTimeout, WriteTimeout: apiWriteTimeout, IdleTimeout: idleTimeout}
	switch *mode {
	case "floor":
		srv.Handler = floor
	case "upstream":
		srv.Handler = answer
	case "proxy":
		u, err := url.Parse(*upstream)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return fmt.Errorf("-upstream %q: want http://host:port", *upstream)
		}
		srv.Handler = proxy(u)
		srv.ReadTimeout, srv.WriteTimeout = exchangeTimeout, exchangeTimeout
	default:
		return fmt.Errorf("-mode %q: want floor, upstream or proxy", *mode)
	}
	if *mode != "proxy" && *upstream != "" {
		return fmt.Errorf("-upstream %q: only with -mode proxy", *upstream)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(logw, "httpfloor: %s listening on http://%s\n", *mode, ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// checkBody has the fields of the node's /v1/check body, as the floor of
// internal/node's in-process benchmarks (floorHandler) decodes them.
type checkBody struct {
	Namespace string  `json:"namespace"`
	Key       string  `json:"key"`
	Cost      float64 `json:"cost"`
	Limits    []struct {
		Limit  float64 `json:"limit"`
		Window string  `json:"window"`
		Type   string  `json:"type"`
	} `json:"limits"`
}

var (
	jsonType    = []string{"application/json"}
	floorAnswer = []byte(`{"allowed":true}` + "\n")
	upAnswer    = []byte("ok\n")
)

// floor decodes the body and answers 200 {"allowed":true}; a body that is
// not JSON gets 400.
var floor = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	var req checkBody
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(floorAnswer)
})

// answer reads the body, if any, and answers 200 "ok".
var answer = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header()["Content-Type"] = []string{"text/plain"}
	_, _ = w.Write(upAnswer)
})

// proxy is the node's gateway proxy (internal/node/gateway.go newProxy) at the
// gateway's default timeouts, without its routes and policies.
func proxy(upstream *url.URL) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
		},
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   connectTimeout,
			ResponseHeaderTimeout: upstreamTimeout,
			ExpectContinueTimeout: time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   256,
			ForceAttemptHTTP2:     true,
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
}
