package node

import (
	"fmt"
	"net/http"
	"path"
	"strconv"
)

// What the node refuses of any request before routing it, on the API and
// the gateway listeners alike, so that the answer is problem+json like
// every other error of the node.
const (
	// maxHeaderBytes bounds a request's line and header fields: beyond,
	// the node answers 431 problem+json (checkHeader).
	maxHeaderBytes = 64 << 10
	// serverMaxHeaderBytes is the bound of the http.Servers, above the
	// node's own so that the node sees the request and answers the 431
	// itself. Past it (plus the 4 KiB Go allows for buffering), Go's
	// server answers a plain-text 431 and closes the connection without
	// calling the node: the one 431 the node cannot shape.
	serverMaxHeaderBytes = 4 * maxHeaderBytes
)

// headerBytes is the size of r's request line and header fields as the
// client sent them, near enough (the server has trimmed spaces and taken
// Host out of Header).
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + len("  \r\n\r\n")
	if r.Host != "" {
		n += len("Host: \r\n") + len(r.Host)
	}
	for k, vv := range r.Header {
		for _, v := range vv {
			n += len(k) + len(v) + len(": \r\n")
		}
	}
	return n
}

// checkHeader answers r with 431 problem+json when its line and header
// fields are over maxHeaderBytes, and reports whether it did.
func checkHeader(w http.ResponseWriter, r *http.Request) bool {
	n := headerBytes(r)
	if n <= maxHeaderBytes {
		return false
	}
	writeProblem(w, headerTooLarge(r, n))
	return true
}

// headerTooLarge is the 431 of r, whose line and fields are n bytes. It
// names the largest header field (or the request target).
func headerTooLarge(r *http.Request, n int) *problem {
	largest, size := "the request target", len(r.RequestURI)
	for k, vv := range r.Header {
		s := 0
		for _, v := range vv {
			s += len(k) + len(v) + len(": \r\n")
		}
		if s > size || s == size && k < largest {
			largest, size = k, s
		}
	}
	if h := len("Host: \r\n") + len(r.Host); h > size {
		largest, size = "Host", h
	}
	if largest != "the request target" {
		largest = "header field " + strconv.Quote(largest)
	}
	return &problem{Type: probHeaderLarge, Title: "Request header fields too large", Status: http.StatusRequestHeaderFieldsTooLarge,
		Detail: fmt.Sprintf("the request line and header fields are %d bytes: at most %d; the largest is %s (%d bytes)", n, maxHeaderBytes, largest, size)}
}

// canonicalPath reports whether ep, an escaped path, is in the form the
// node's endpoints are named in: absolute, with no empty, "." or ".."
// segment and no trailing slash ("/" itself aside).
func canonicalPath(ep string) bool {
	return ep != "" && ep[0] == '/' && path.Clean(ep) == ep
}

// nonCanonical is the 404 of r, whose path is not canonical. The node
// answers it rather than redirecting, for every method: a redirected POST
// is a trap (a 301 or 302 turns into a GET that drops the body in most
// clients; a 307 makes the client send the body again to a URL it did not
// write), an API client is better told the path it got wrong than having
// the mistake papered over on every call, and the endpoints are few and
// fixed. The detail names the canonical path when it is an endpoint.
func nonCanonical(r *http.Request, mux *http.ServeMux) *problem {
	if r.RequestURI == "*" { // OPTIONS * never gets here: Go's server answers it
		return invalid("", r.Method+" *: the asterisk form of request target is for OPTIONS only")
	}
	ep := r.URL.EscapedPath()
	detail := fmt.Sprintf("%s %s: no such endpoint: the path has an empty, \".\" or \"..\" segment or a trailing slash, and the node does not redirect", r.Method, ep)
	if clean := path.Clean("/" + r.URL.Path); clean != "/" {
		r2 := *r
		u := *r.URL
		u.Path, u.RawPath = clean, ""
		r2.URL = &u
		if _, pattern := mux.Handler(&r2); pattern != "" && pattern != "/" {
			detail += ": did you mean " + clean + "?"
		}
	}
	return notFound("", detail)
}
