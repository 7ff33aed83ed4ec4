package middleware

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	req := func(target string, headers ...string) func() *http.Request {
		return func() *http.Request {
			r := httptest.NewRequest("POST", target, nil)
			r.RemoteAddr = "203.0.113.7:51000"
			for i := 0; i+1 < len(headers); i += 2 {
				r.Header.Add(headers[i], headers[i+1])
			}
			return r
		}
	}
	tests := []struct {
		name      string
		selectors []string
		opts      KeyOptions
		req       func() *http.Request
		want      string
	}{
		{"default is ip", nil, KeyOptions{}, req("/"), "203.0.113.7"},
		{"ip", []string{"ip"}, KeyOptions{}, req("/"), "203.0.113.7"},
		{"header", []string{"header:x-api-key"}, KeyOptions{}, req("/", "X-Api-Key", "k1"), "k1"},
		{"header missing: ip", []string{"header:X-Api-Key"}, KeyOptions{}, req("/"), "203.0.113.7"},
		{"header empty: ip", []string{"header:X-Api-Key"}, KeyOptions{}, req("/", "X-Api-Key", ""), "203.0.113.7"},
		{"header missing: empty", []string{"header:X-Api-Key"}, KeyOptions{Fallback: FallbackEmpty}, req("/"), ""},
		{"query", []string{"query:user"}, KeyOptions{}, req("/x?a=1&user=bob&user=eve"), "bob"},
		{"query escaped", []string{"query:the user"}, KeyOptions{}, req("/x?the+user=b%C3%B6b"), "böb"},
		{"query missing: empty", []string{"query:user"}, KeyOptions{Fallback: FallbackEmpty}, req("/x?a=1"), ""},
		{"method", []string{"method"}, KeyOptions{}, req("/"), "POST"},
		{"path", []string{"path"}, KeyOptions{}, req("/a/b?c=d"), "/a/b"},
		{"consumer", []string{"consumer"}, KeyOptions{ConsumerHeader: "X-Consumer-ID"}, req("/", "X-Consumer-Id", "c-9"), "c-9"},
		{"compound", []string{"header:X-Api-Key", "method", "path"}, KeyOptions{}, req("/p", "X-Api-Key", "k"), "k:POST:/p"},
		{"compound, part missing: ip", []string{"header:X-Api-Key", "method"}, KeyOptions{}, req("/p"), "203.0.113.7:POST"},
		{"compound, part missing: empty", []string{"header:X-Api-Key", "method"}, KeyOptions{Fallback: FallbackEmpty}, req("/p"), ":POST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParseKey(tt.selectors, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := f(tt.req()); got != tt.want {
				t.Errorf("key = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseKeyErrors(t *testing.T) {
	tests := []struct {
		name      string
		selectors []string
		opts      KeyOptions
		want      string
	}{
		{"unknown", []string{"cookie:x"}, KeyOptions{}, "must be one of"},
		{"header without name", []string{"header"}, KeyOptions{}, "needs a name"},
		{"header empty name", []string{"header:"}, KeyOptions{}, "needs a name"},
		{"bad header name", []string{"header:a b"}, KeyOptions{}, "not a valid header name"},
		{"ip with a name", []string{"ip:x"}, KeyOptions{}, "must be one of"},
		{"consumer without header", []string{"consumer"}, KeyOptions{}, "consumer header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseKey(tt.selectors, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseKey(%q) = %v, want an error containing %q", tt.selectors, err, tt.want)
			}
		})
	}
}

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	tests := []struct {
		name    string
		remote  string
		xff     []string
		trusted []netip.Prefix
		want    string
	}{
		{"peer, no proxies", "198.51.100.1:1234", []string{"1.1.1.1"}, nil, "198.51.100.1"},
		{"untrusted peer: X-Forwarded-For ignored", "198.51.100.1:1234", []string{"1.1.1.1"}, trusted, "198.51.100.1"},
		{"trusted peer: right-most untrusted", "10.0.0.2:1234", []string{"6.6.6.6, 1.1.1.1, 10.0.0.9"}, trusted, "1.1.1.1"},
		{"several headers in order", "10.0.0.2:1234", []string{"6.6.6.6", "1.1.1.1", "10.1.1.1"}, trusted, "1.1.1.1"},
		{"all trusted: the left-most", "10.0.0.2:1234", []string{"10.0.0.7, 10.0.0.8"}, trusted, "10.0.0.7"},
		{"no header: the peer", "10.0.0.2:1234", nil, trusted, "10.0.0.2"},
		{"garbage stops the walk", "10.0.0.2:1234", []string{"1.1.1.1, bogus, 10.0.0.5"}, trusted, "10.0.0.5"},
		{"port and brackets", "10.0.0.2:1234", []string{"[2001:db8::1]:443"}, trusted, "2001:db8::1"},
		{"ipv6 peer", "[::1]:80", []string{"192.0.2.4"}, trusted, "192.0.2.4"},
		{"ipv4-mapped peer", "[::ffff:192.0.2.9]:80", nil, nil, "192.0.2.9"},
		{"not an address", "pipe", nil, trusted, "pipe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := ClientIP(r, tt.trusted); got != tt.want {
				t.Errorf("ClientIP = %q, want %q", got, tt.want)
			}
		})
	}
}
