package middleware

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"
)

// KeyFunc returns the rate-limiting key of a request: requests with equal
// keys share counters. It must be safe for concurrent use.
type KeyFunc func(r *http.Request) string

// Fallback is what a key selector yields when the request lacks the value
// it selects (no such header, no such query parameter).
type Fallback uint8

// Fallbacks.
const (
	// FallbackIP uses the client IP instead (Kong's behaviour): clients
	// without the value are limited one by one. The default.
	FallbackIP Fallback = iota
	// FallbackEmpty uses the empty string (MuleSoft Flex's behaviour): all
	// clients without the value share one bucket.
	FallbackEmpty
)

// KeyOptions configures ParseKey.
type KeyOptions struct {
	// TrustedProxies lists the peers whose X-Forwarded-For is believed.
	// Empty (the default): the client IP is the peer address, and
	// X-Forwarded-For is ignored, as a client can write anything in it.
	TrustedProxies []netip.Prefix
	// ConsumerHeader is the request header naming the consumer for the
	// "consumer" selector (set by an authenticating proxy in front, such as
	// X-Consumer-ID). Required when a selector is "consumer".
	ConsumerHeader string
	// Fallback applies to each selector whose value is missing.
	Fallback Fallback
}

// Selectors lists the key selectors ParseKey accepts.
const Selectors = "ip, header:NAME, query:NAME, method, path, consumer"

// ParseKey returns the KeyFunc of a list of selectors, whose values are
// joined with ':' (Kong's compound identifier):
//
//   - ip: the client IP (see ClientIP);
//   - header:NAME: the first value of request header NAME;
//   - query:NAME: the first value of query parameter NAME;
//   - method: the request method;
//   - path: the request path;
//   - consumer: the first value of header o.ConsumerHeader.
//
// A selector whose value is missing or empty yields the fallback of o. An
// empty list selects the client IP.
func ParseKey(selectors []string, o KeyOptions) (KeyFunc, error) {
	if len(selectors) == 0 {
		selectors = []string{"ip"}
	}
	parts := make([]KeyFunc, len(selectors))
	for i, s := range selectors {
		f, err := parseSelector(s, o)
		if err != nil {
			return nil, err
		}
		parts[i] = f
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return func(r *http.Request) string {
		var arr [256]byte
		buf := arr[:0]
		for i, f := range parts {
			if i > 0 {
				buf = append(buf, ':')
			}
			buf = append(buf, f(r)...)
		}
		return string(buf)
	}, nil
}

func parseSelector(s string, o KeyOptions) (KeyFunc, error) {
	kind, name, hasName := strings.Cut(s, ":")
	named := kind == "header" || kind == "query"
	if named != hasName || (named && name == "") {
		if named {
			return nil, fmt.Errorf("middleware: key selector %q: %s needs a name: %s:NAME", s, kind, kind)
		}
		return nil, fmt.Errorf("middleware: key selector %q: must be one of %s", s, Selectors)
	}
	trusted := o.TrustedProxies
	fallback := func(r *http.Request) string {
		if o.Fallback == FallbackEmpty {
			return ""
		}
		return ClientIP(r, trusted)
	}
	switch kind {
	case "ip":
		return func(r *http.Request) string { return ClientIP(r, trusted) }, nil
	case "method":
		return func(r *http.Request) string { return r.Method }, nil
	case "path":
		return pathKey(fallback), nil
	case "consumer":
		if o.ConsumerHeader == "" {
			return nil, fmt.Errorf("middleware: key selector %q: needs a consumer header (KeyOptions.ConsumerHeader; gateway.consumer_header in the node's config)", s)
		}
		return headerKey(s, o.ConsumerHeader, fallback)
	case "header":
		return headerKey(s, name, fallback)
	case "query":
		return queryKey(name, fallback), nil
	}
	return nil, fmt.Errorf("middleware: key selector %q: must be one of %s", s, Selectors)
}

// pathKey selects the request path.
func pathKey(fallback KeyFunc) KeyFunc {
	return func(r *http.Request) string {
		if r.URL == nil || r.URL.Path == "" {
			return fallback(r)
		}
		return r.URL.Path
	}
}

// headerKey selects the first value of header name (of selector s).
func headerKey(s, name string, fallback KeyFunc) (KeyFunc, error) {
	if !validHeaderName(name) {
		return nil, fmt.Errorf("middleware: key selector %q: %q is not a valid header name", s, name)
	}
	canon := textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) string {
		if v := r.Header[canon]; len(v) > 0 && v[0] != "" {
			return v[0]
		}
		return fallback(r)
	}, nil
}

// queryKey selects the first value of query parameter name.
func queryKey(name string, fallback KeyFunc) KeyFunc {
	return func(r *http.Request) string {
		if r.URL != nil {
			if v, ok := queryValue(r.URL.RawQuery, name); ok && v != "" {
				return v
			}
		}
		return fallback(r)
	}
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

// queryValue returns the first value of parameter name in a raw query
// without building url.Values: it unescapes only what it must.
func queryValue(raw, name string) (string, bool) {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(pair, "=")
		if k != name {
			if !strings.ContainsAny(k, "%+") {
				continue
			}
			uk, err := url.QueryUnescape(k)
			if err != nil || uk != name {
				continue
			}
		}
		if strings.ContainsAny(v, "%+") {
			uv, err := url.QueryUnescape(v)
			if err != nil {
				return "", false
			}
			return uv, true
		}
		return v, true
	}
	return "", false
}

// ClientIP returns the address of the client that sent r. Without trusted
// proxies it is the peer address (r.RemoteAddr). When the peer is a trusted
// proxy, it walks X-Forwarded-For from the right, past trusted addresses,
// and returns the right-most address that is not trusted: the first hop
// no trusted proxy vouches for, which a client cannot forge. IPv4-mapped
// IPv6 addresses are returned as IPv4.
func ClientIP(r *http.Request, trusted []netip.Prefix) string {
	host := r.RemoteAddr
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host // not an IP address (a unix socket, a test): as given
	}
	if addr.Is4In6() || addr.Zone() != "" {
		addr = addr.Unmap().WithZone("")
		host = ""
	}
	if len(trusted) == 0 || !isTrusted(addr, trusted) {
		if host == "" {
			return addr.String()
		}
		return host
	}
	client := addr
	vals := r.Header["X-Forwarded-For"]
	for i := len(vals) - 1; i >= 0; i-- {
		v := vals[i]
		for v != "" {
			var part string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				part, v = v[j+1:], v[:j]
			} else {
				part, v = v, ""
			}
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			a, ok := parseHop(part)
			if !ok {
				return client.String() // garbage: trust nothing beyond it
			}
			client = a
			if !isTrusted(a, trusted) {
				return a.String()
			}
		}
	}
	return client.String()
}

// parseHop parses one X-Forwarded-For element: an address, possibly with a
// port or in brackets.
func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
