package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/ratesync/ratesync/ratelimiting"
)

// problem is an RFC 9457 problem detail. Field names the request field at
// fault ("limits[0].window", "key", "body"), when one is. Message is Kong's
// member, set on the gateway's own errors so that clients written for Kong
// read them too. allow is the Allow header of a 405.
type problem struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Status  int    `json:"status"`
	Detail  string `json:"detail,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message,omitempty"`
	allow   string
}

// Problem types.
const (
	probInvalid     = "urn:ratesync:problem:invalid-input"
	probNotFound    = "urn:ratesync:problem:not-found"
	probTooLarge    = "urn:ratesync:problem:body-too-large"
	probMethod      = "urn:ratesync:problem:method-not-allowed"
	probUnauth      = "urn:ratesync:problem:unauthorized"
	probForbidden   = "urn:ratesync:problem:forbidden"
	probUnavailable = "urn:ratesync:problem:unavailable"
	probHeaderLarge = "urn:ratesync:problem:header-too-large"
	probUpstream    = "urn:ratesync:problem:upstream-unavailable"
	probUpstreamTO  = "urn:ratesync:problem:upstream-timeout"
)

// invalid is a 400 naming field.
func invalid(field, detail string) *problem {
	return &problem{Type: probInvalid, Title: "Invalid request", Status: http.StatusBadRequest, Detail: detail, Field: field}
}

// invalidValue is a 400 naming field, the value given and what is allowed.
func invalidValue(field, value, allowed string) *problem {
	return invalid(field, fmt.Sprintf("%s: %s: %s", field, value, allowed))
}

func notFound(field, detail string) *problem {
	return &problem{Type: probNotFound, Title: "Not found", Status: http.StatusNotFound, Detail: detail, Field: field}
}

func tooLarge(limit int64) *problem {
	return &problem{Type: probTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
		Detail: "the body must be at most " + strconv.FormatInt(limit, 10) + " bytes", Field: "body"}
}

// methodNotAllowed is a 405 for r, whose path allows the methods allow
// ("GET, HEAD"), which the Allow header lists.
func methodNotAllowed(r *http.Request, allow string) *problem {
	return &problem{Type: probMethod, Title: "Method not allowed", Status: http.StatusMethodNotAllowed,
		Detail: fmt.Sprintf("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, allow), allow: allow}
}

func unavailable(detail string) *problem {
	return &problem{Type: probUnavailable, Title: "Service unavailable", Status: http.StatusServiceUnavailable, Detail: detail}
}

// problemOf maps an error of the ratelimiting library to a response: bad
// input 400 naming the field, an unknown namespace 404 naming it, anything
// else (a closing instance, a canceled request, a store) 503. Never 500.
func problemOf(err error, ns string) *problem {
	var ie *ratelimiting.InputError
	switch {
	case errors.As(err, &ie):
		field := ie.Field
		if f, ok := strings.CutSuffix(field, ".algorithm"); ok { // what the API calls type
			field = f + ".type"
		}
		return invalidValue(field, ie.Value, ie.Allowed)
	case errors.Is(err, ratelimiting.ErrNamespaceNotFound):
		return notFound("namespace", fmt.Sprintf("namespace %q: no such namespace", ns))
	case errors.Is(err, ratelimiting.ErrClosed):
		return unavailable("the node is shutting down")
	default:
		return unavailable(err.Error())
	}
}

// writeProblem answers with p as application/problem+json.
func writeProblem(w http.ResponseWriter, p *problem) {
	h := w.Header()
	h["Content-Type"] = problemContentType
	h["Cache-Control"] = noStore
	if p.Status == http.StatusServiceUnavailable && h.Get("Retry-After") == "" {
		h["Retry-After"] = one
	}
	if p.allow != "" {
		h["Allow"] = []string{p.allow}
	}
	w.WriteHeader(p.Status)
	body, _ := json.Marshal(p)
	_, _ = w.Write(append(body, '\n'))
}

var (
	problemContentType = []string{"application/problem+json"}
	jsonContentType    = []string{"application/json"}
	noStore            = []string{"no-store"}
	one                = []string{"1"}
)
