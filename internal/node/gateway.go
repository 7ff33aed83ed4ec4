package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratesync/ratesync/internal/node/config"
)

// gateway is the node's reverse proxy: each request is matched to a route
// by path prefix and method (the longest prefix wins; on equal prefixes,
// the first route in the file), checked by the route's policy through the
// middleware, and proxied to the upstream when allowed. Requests no route
// matches are proxied unlimited (a route with path "/" limits everything).
// Its routes and proxy are one table, read with an atomic load and
// replaced whole by a reload.
type gateway struct {
	routes atomic.Pointer[gwRoutes]
}

// gwRoutes is the gateway's route table and the proxy behind it.
type gwRoutes struct {
	routes []gwRoute // longest prefix first
	proxy  *httputil.ReverseProxy
	cfg    config.GatewayConfig // what the proxy was built from
}

type gwRoute struct {
	prefix  string // without a trailing slash; "" matches every path
	methods []string
	handler http.Handler // the policy's limiter in front of the proxy
}

// newRoutes returns the route table of c over policies. The proxy of prev
// (the running table, or nil) is kept when c's upstream, timeouts and
// trusted proxies are prev's: its idle connections stay open.
func newRoutes(c config.GatewayConfig, policies map[string]*policy, log *slog.Logger, prev *gwRoutes) (*gwRoutes, error) {
	t := &gwRoutes{cfg: c}
	if prev != nil && sameProxy(prev.cfg, c) {
		t.proxy = prev.proxy
	} else {
		t.proxy = newProxy(c, log)
	}
	for _, rc := range c.Routes {
		p := policies[rc.Policy]
		if p == nil {
			return nil, fmt.Errorf("gateway route %q: no such policy %q", rc.Path, rc.Policy)
		}
		t.routes = append(t.routes, gwRoute{
			prefix:  strings.TrimSuffix(path.Clean(rc.Path), "/"),
			methods: rc.Methods,
			handler: p.lim.Handler(t.proxy),
		})
	}
	slices.SortStableFunc(t.routes, func(a, b gwRoute) int { return cmp.Compare(len(b.prefix), len(a.prefix)) })
	return t, nil
}

// sameProxy reports whether a and b build the same proxy.
func sameProxy(a, b config.GatewayConfig) bool {
	return a.Upstream == b.Upstream && a.Timeout == b.Timeout && a.ConnectTimeout == b.ConnectTimeout && slices.Equal(a.Trusted, b.Trusted)
}

// closeIdle closes the idle upstream connections of t's proxy.
func (t *gwRoutes) closeIdle() {
	if tr, ok := t.proxy.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

// newProxy returns the reverse proxy to the upstream. Every exchange is
// bounded: connecting by connect_timeout, the upstream's response headers
// by timeout. An upstream that times out gets the client a 504, one that
// fails otherwise a 502, never a hang (upstreamProblem).
func newProxy(c config.GatewayConfig, log *slog.Logger) *httputil.ReverseProxy {
	upstream, trusted := c.UpstreamURL, c.Trusted
	connect := time.Duration(c.ConnectTimeout)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			// Keep the chain of forwarders only when the peer is a proxy
			// we trust; a client's own X-Forwarded-For is dropped.
			if peerTrusted(pr.In, trusted) {
				pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			}
			pr.SetXForwarded()
		},
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   connect,
			ResponseHeaderTimeout: time.Duration(c.Timeout),
			ExpectContinueTimeout: time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   256,
			ForceAttemptHTTP2:     true,
		},
		BufferPool: proxyBuffers,
		ErrorLog:   slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				// The client went away (or the server is shutting down):
				// nobody reads an answer, and the upstream did not fail.
				log.Debug("client gone before the upstream answered", "method", r.Method, "path", r.URL.Path, "err", err)
				w.WriteHeader(statusClientClosed)
				return
			}
			log.Warn("upstream failed", "method", r.Method, "path", r.URL.Path, "err", err)
			writeProblem(w, upstreamProblem(err, c))
		},
	}
}

// statusClientClosed is the status the gateway records for a request
// whose client went away before the upstream answered (nginx's 499): no
// client reads it.
const statusClientClosed = 499

// proxyBuffers recycles the buffers the proxy copies response bodies
// through. Without a pool, httputil.ReverseProxy allocates 32 KiB per
// request: most of the gateway's garbage, and so of its GC work.
var proxyBuffers = &bufferPool{pool: sync.Pool{New: func() any { return new([proxyBufferSize]byte) }}}

const proxyBufferSize = 32 << 10 // httputil.ReverseProxy's own

// bufferPool is an httputil.BufferPool over a sync.Pool of array
// pointers: a buffer goes in and out of the pool without allocating.
type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte { return p.pool.Get().(*[proxyBufferSize]byte)[:] }

func (p *bufferPool) Put(b []byte) {
	if cap(b) == proxyBufferSize {
		p.pool.Put((*[proxyBufferSize]byte)(b[:proxyBufferSize]))
	}
}

// upstreamProblem is the gateway's answer when the exchange with the
// upstream failed with err: 504 when it timed out, else 502. The detail
// says which bound ran out, not the upstream's address (the log has the
// error); message is "upstream unavailable" or "upstream timed out", for
// clients of Kong's {"message": ...} bodies.
func upstreamProblem(err error, c config.GatewayConfig) *problem {
	var (
		ne   net.Error
		oe   *net.OpError
		dial = errors.As(err, &oe) && oe.Op == "dial"
	)
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		detail := fmt.Sprintf("the upstream sent no response headers within gateway.timeout (%s)", time.Duration(c.Timeout))
		if dial {
			detail = fmt.Sprintf("the connection to the upstream was not made within gateway.connect_timeout (%s)", time.Duration(c.ConnectTimeout))
		}
		return &problem{Type: probUpstreamTO, Title: "Upstream timed out", Status: http.StatusGatewayTimeout, Detail: detail, Message: "upstream timed out"}
	}
	detail := "the exchange with the upstream failed"
	if dial {
		detail = "the connection to the upstream failed"
	}
	return &problem{Type: probUpstream, Title: "Upstream unavailable", Status: http.StatusBadGateway, Detail: detail, Message: "upstream unavailable"}
}

// peerTrusted reports whether the request's peer is a trusted proxy.
func peerTrusted(r *http.Request, trusted []netip.Prefix) bool {
	if len(trusted) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap().WithZone("")
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ServeHTTP routes r, after the node's own check of its header size.
func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if checkHeader(w, r) {
		return
	}
	t := g.routes.Load()
	if rt := t.match(r); rt != nil {
		rt.handler.ServeHTTP(w, r)
		return
	}
	t.proxy.ServeHTTP(w, r)
}

// match returns the route of r in the table in force.
func (g *gateway) match(r *http.Request) *gwRoute { return g.routes.Load().match(r) }

// match returns the route of r: the longest prefix of its cleaned path
// (so /api/../admin is /admin), matched segment by segment, among the
// routes allowing its method.
func (t *gwRoutes) match(r *http.Request) *gwRoute {
	p := r.URL.Path
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	if strings.Contains(p, "/.") || strings.Contains(p, "//") {
		p = path.Clean(p)
	}
	for i := range t.routes {
		rt := &t.routes[i]
		if p != rt.prefix && !strings.HasPrefix(p, rt.prefix+"/") {
			continue
		}
		if len(rt.methods) == 0 || slices.Contains(rt.methods, r.Method) {
			return rt
		}
	}
	return nil
}
