package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"
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
	cfg    GatewayConfig // what the proxy was built from
}

type gwRoute struct {
	prefix  string // without a trailing slash; "" matches every path
	methods []string
	handler http.Handler // the policy's limiter in front of the proxy
}

// newRoutes returns the route table of c over policies. The proxy of prev
// (the running table, or nil) is kept when c's upstream, timeouts and
// trusted proxies are prev's: its idle connections stay open.
func newRoutes(c GatewayConfig, policies map[string]*policy, log *slog.Logger, prev *gwRoutes) (*gwRoutes, error) {
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
func sameProxy(a, b GatewayConfig) bool {
	return a.Upstream == b.Upstream && a.Timeout == b.Timeout && a.ConnectTimeout == b.ConnectTimeout && slices.Equal(a.trusted, b.trusted)
}

// closeIdle closes the idle upstream connections of t's proxy.
func (t *gwRoutes) closeIdle() {
	if tr, ok := t.proxy.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

// newProxy returns the reverse proxy to the upstream. Every exchange is
// bounded: connecting by connect_timeout, the upstream's response headers
// by timeout. An upstream that fails or times out gets the client a 502
// with {"message":"upstream unavailable"}, never a hang.
func newProxy(c GatewayConfig, log *slog.Logger) *httputil.ReverseProxy {
	upstream, trusted := c.upstream, c.trusted
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
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("upstream failed", "method", r.Method, "path", r.URL.Path, "err", err)
			h := w.Header()
			h["Content-Type"] = jsonContentType
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(`{"message":"upstream unavailable"}` + "\n"))
		},
	}
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

// ServeHTTP routes r.
func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
