package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/middleware"
	"github.com/ratesync/ratesync/ratelimiting"
)

// routes returns the node's HTTP API:
//
//	POST /v1/check                    decide a request (check.go)
//	POST /v1/increment                Kong's increment
//	GET  /v1/window                   Kong's sliding_window
//	GET  /v1/namespaces               effective namespace config, secrets masked
//	POST /v1/namespaces/{name}/sync   push and fetch now (admin)
//	POST /json                        Envoy's ShouldRateLimit as JSON (rls section)
//	GET  /healthz, /readyz, /metrics
//
// Every error it answers is problem+json: header fields over
// maxHeaderBytes 431, a path not in canonical form 404 (never a redirect),
// an unknown path 404, another method 405 with Allow.
func (n *Node) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/check", n.handleCheck)
	mux.HandleFunc("/v1/increment", only(http.MethodPost, n.handleIncrement))
	mux.HandleFunc("/v1/window", only(http.MethodGet, n.handleWindow))
	mux.HandleFunc("/v1/namespaces", only(http.MethodGet, n.handleNamespaces))
	mux.HandleFunc("/v1/namespaces/{name}/sync", only(http.MethodPost, n.admin(n.handleSync)))
	mux.HandleFunc("/json", only(http.MethodPost, n.handleJSON))
	mux.HandleFunc("/healthz", only(http.MethodGet, n.handleHealthz))
	mux.HandleFunc("/readyz", only(http.MethodGet, n.handleReadyz))
	mux.HandleFunc("/metrics", only(http.MethodGet, n.metrics.handler().ServeHTTP))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, notFound("", fmt.Sprintf("%s %s: no such endpoint", r.Method, r.URL.Path)))
	})
	return apiHandler{check: n.handleCheck, mux: mux}
}

// apiHandler sends /v1/check straight to its handler, before the mux: the
// hot path skips pattern matching. Other paths reach the mux only in
// canonical form, so that the mux never redirects (it would answer a
// path like /v1//check with a 307 of its own).
type apiHandler struct {
	check http.HandlerFunc
	mux   *http.ServeMux
}

func (a apiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if checkHeader(w, r) {
		return
	}
	if r.URL.Path == "/v1/check" {
		a.check(w, r)
		return
	}
	if !canonicalPath(r.URL.EscapedPath()) {
		writeProblem(w, nonCanonical(r, a.mux))
		return
	}
	a.mux.ServeHTTP(w, r)
}

// only answers other methods with 405 (GET also allows HEAD).
func only(method string, h http.HandlerFunc) http.HandlerFunc {
	allow := method
	if method == http.MethodGet {
		allow = "GET, HEAD"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			writeProblem(w, methodNotAllowed(r, allow))
			return
		}
		h(w, r)
	}
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Cache-Control"] = noStore
	w.WriteHeader(status)
	body, _ := json.Marshal(v)
	_, _ = w.Write(append(body, '\n'))
}

// windowJSON is a key's window: the answer of /v1/increment and /v1/window.
type windowJSON struct {
	Namespace     string  `json:"namespace"`
	Key           string  `json:"key"`
	Window        string  `json:"window"`
	WindowStartMS int64   `json:"window_start_ms"`
	Rate          float64 `json:"rate"`
	Current       float64 `json:"current"`
	Previous      float64 `json:"previous"`
	Weight        float64 `json:"weight"`
}

func toWindowJSON(ns, key string, w ratelimiting.Window) windowJSON {
	return windowJSON{
		Namespace: ns, Key: key, Window: middleware.FormatWindow(w.Size), WindowStartMS: w.Start.UnixMilli(),
		Rate: w.Rate(), Current: w.Current, Previous: w.Previous, Weight: w.Weight,
	}
}

// incrementBody is the JSON body of POST /v1/increment.
type incrementBody struct {
	Namespace string  `json:"namespace"`
	Key       string  `json:"key"`
	Window    string  `json:"window"`
	Value     float64 `json:"value"` // NaN before decoding: absent (1)
}

var incrementSchema = []jsonField{
	{name: "namespace", kind: kString},
	{name: "key", kind: kString},
	{name: "window", kind: kString},
	{name: "value", kind: kNumber},
}

// handleIncrement is POST /v1/increment: Kong's increment. value (default
// 1) may be fractional, and negative to refund.
func (n *Node) handleIncrement(w http.ResponseWriter, r *http.Request) {
	buf, p := readBody(w, r, n.state().cfg.Node.MaxBodyBytes)
	if p != nil {
		writeProblem(w, p)
		return
	}
	b := incrementBody{Value: math.NaN()}
	p = decodeStrict(buf.Bytes(), nil, &b, incrementSchema)
	putBody(buf)
	if p == nil {
		p = n.checkKey(b.Key)
	}
	var size time.Duration
	if p == nil {
		size, p = n.windowParam(b.Window)
	}
	if p == nil && !math.IsNaN(b.Value) && math.Abs(b.Value) > config.MaxNumber {
		p = invalidValue("value", formatNumber(b.Value), fmt.Sprintf("must be between -%g and %g", float64(config.MaxNumber), float64(config.MaxNumber)))
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	if math.IsNaN(b.Value) {
		b.Value = 1
	}
	if b.Namespace == "" {
		b.Namespace = "default"
	}
	win, err := n.in.Increment(r.Context(), b.Namespace, b.Key, size, b.Value)
	if err != nil {
		writeProblem(w, problemOf(err, b.Namespace))
		return
	}
	writeJSON(w, http.StatusOK, toWindowJSON(b.Namespace, b.Key, win))
}

// handleWindow is GET /v1/window?namespace=&key=&window=: Kong's
// sliding_window, read-only.
func (n *Node) handleWindow(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k, v := range q {
		switch {
		case k != "namespace" && k != "key" && k != "window":
			writeProblem(w, invalid(k, k+": unknown query parameter (known: namespace, key, window)"))
			return
		case len(v) > 1:
			writeProblem(w, invalid(k, k+": given more than once"))
			return
		}
	}
	ns, key := q.Get("namespace"), q.Get("key")
	p := n.checkKey(key)
	var size time.Duration
	if p == nil {
		size, p = n.windowParam(q.Get("window"))
	}
	if p != nil {
		writeProblem(w, p)
		return
	}
	if ns == "" {
		ns = "default"
	}
	win, err := n.in.SlidingWindow(r.Context(), ns, key, size)
	if err != nil {
		writeProblem(w, problemOf(err, ns))
		return
	}
	writeJSON(w, http.StatusOK, toWindowJSON(ns, key, win))
}

func (n *Node) checkKey(key string) *problem {
	maxKey := n.state().cfg.Node.MaxKeyBytes
	switch {
	case key == "":
		return invalid("key", "key: required: the client's key, like \"user:42\"")
	case len(key) > maxKey:
		return invalid("key", fmt.Sprintf("key: %d bytes: must be at most %d bytes", len(key), maxKey))
	}
	return nil
}

func (n *Node) windowParam(s string) (time.Duration, *problem) {
	if s == "" {
		return 0, invalid("window", "window: required: a duration like 1s, 1m, 1h")
	}
	return parseWindowField(s, func() string { return "window" })
}

// namespaceJSON is one namespace in GET /v1/namespaces.
type namespaceJSON struct {
	config.NamespaceConfig
	Policies []string `json:"policies"`
}

// handleNamespaces is GET /v1/namespaces: the effective configuration of
// every namespace, secrets masked, with the policies using it.
func (n *Node) handleNamespaces(w http.ResponseWriter, _ *http.Request) {
	cfg := n.state().cfg
	masked := cfg.Masked()
	out := make([]namespaceJSON, 0, len(masked.Namespaces))
	for _, ns := range masked.Namespaces {
		nj := namespaceJSON{NamespaceConfig: ns, Policies: []string{}}
		for _, p := range cfg.Policies {
			if p.Namespace == ns.Name {
				nj.Policies = append(nj.Policies, p.Name)
			}
		}
		slices.Sort(nj.Policies)
		out = append(out, nj)
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespaces": out})
}

// handleSync is POST /v1/namespaces/{name}/sync (admin): push the
// namespace's pending diffs and fetch its totals now.
func (n *Node) handleSync(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var local, found bool
	for _, ns := range n.state().cfg.Namespaces {
		if ns.Name == name {
			found, local = true, ns.Strategy == config.StrategyLocal
		}
	}
	if !found {
		writeProblem(w, notFound("name", fmt.Sprintf("namespace %q: no such namespace", name)))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), min(adminSyncTimeout, apiWriteTimeout-time.Second))
	defer cancel()
	start := time.Now()
	if err := n.in.Sync(ctx, name); err != nil {
		if errors.Is(err, ratelimiting.ErrNamespaceNotFound) || errors.Is(err, ratelimiting.ErrClosed) {
			writeProblem(w, problemOf(err, name))
			return
		}
		writeProblem(w, unavailable(fmt.Sprintf("namespace %q: sync failed: %s", name, n.redact(err.Error()))))
		return
	}
	res := map[string]any{"namespace": name, "synced": !local, "duration_ms": time.Since(start).Milliseconds()}
	if local {
		res["detail"] = "local-only namespace: nothing to sync"
	}
	writeJSON(w, http.StatusOK, res)
}

// redact masks the node's secrets in s.
func (n *Node) redact(s string) string {
	for _, sec := range n.state().cfg.Secrets() {
		s = strings.ReplaceAll(s, sec, "xxxxx")
	}
	return s
}
