package node

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
)

// Store probes of /readyz: sync statistics are as old as the last sync (up
// to sync_rate, or never for an idle synchronous namespace); a probe tells
// whether the store answers now.
const (
	probeTimeout = time.Second
	probeEvery   = time.Second // a probe result is reused this long
	probeKey     = "ratesync:readyz-probe"
)

// readiness is one namespace's part of /readyz.
type readiness struct {
	Namespace string `json:"namespace"`
	Ready     bool   `json:"ready"`
	Reason    string `json:"reason,omitempty"`
}

// handleHealthz is GET /healthz: the process is alive and serving.
func (n *Node) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
}

// handleReadyz is GET /readyz: 200 when every namespace can decide with
// the cluster's counts, else 503 naming the namespaces that cannot and why.
// A local namespace is always ready; a synchronous one when its store is
// up; a periodic one when its store is up and its last good sync is younger
// than 3 × sync_rate. The reason of a store that does not answer names it
// (strategy and URL, its password masked). A node shutting down is not
// ready.
func (n *Node) handleReadyz(w http.ResponseWriter, _ *http.Request) {
	if n.closing.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "reason": "shutting down"})
		return
	}
	rs := n.readiness(time.Now())
	status, code := "ready", http.StatusOK
	for _, r := range rs {
		if !r.Ready {
			status, code = "not ready", http.StatusServiceUnavailable
		}
	}
	writeJSON(w, code, map[string]any{"status": status, "namespaces": rs})
}

// readiness judges every namespace as of now, probing the stores.
func (n *Node) readiness(now time.Time) []readiness {
	stats := n.in.Stats()
	probes := make([]error, len(stats))
	var wg sync.WaitGroup
	for i, st := range stats {
		if !st.Config.Local() {
			wg.Go(func() { probes[i] = n.probes.probe(st.Config, now) })
		}
	}
	wg.Wait()
	out := make([]readiness, 0, len(stats))
	for i, st := range stats {
		out = append(out, n.judge(st, now, probes[i]))
	}
	return out
}

// judge says whether one namespace is ready, given its stats and the
// result of probing its store.
func (n *Node) judge(st ratelimiting.NamespaceStats, now time.Time, probeErr error) readiness {
	r := readiness{Namespace: st.Config.Name, Ready: true}
	s := st.Sync
	switch {
	case st.Config.Local():
	case probeErr != nil:
		r.Ready, r.Reason = false, n.storeName(st.Config.Name)+" unreachable: "+n.redact(probeErr.Error())
	case !s.StoreUp:
		r.Ready, r.Reason = false, n.storeName(st.Config.Name)+" unreachable"
		if s.LastError != nil {
			r.Reason += fmt.Sprintf(" since %s: %s", s.LastErrorAt.UTC().Format(time.RFC3339), n.redact(s.LastError.Error()))
		}
	case st.Config.SyncRate == 0:
	case s.LastGood.IsZero():
		r.Ready, r.Reason = false, "no successful sync yet"
	case now.Sub(s.LastGood) > 3*st.Config.SyncRate:
		r.Ready, r.Reason = false, fmt.Sprintf("last good sync %s ago, more than 3 × sync_rate (%s)",
			now.Sub(s.LastGood).Round(time.Millisecond), st.Config.SyncRate)
	}
	return r
}

// storeName names the store of namespace ns as readiness reasons do:
// "store postgres at postgres://user:xxxxx@host:5432/db", or "store" alone
// for a namespace the configuration does not name.
func (n *Node) storeName(ns string) string {
	for _, c := range n.state().cfg.Namespaces {
		if c.Name == ns && c.Strategy != config.StrategyLocal {
			if c.URL == "" {
				return "store " + c.Strategy
			}
			return "store " + c.Strategy + " at " + config.MaskURL(c.URL)
		}
	}
	return "store"
}

// probes caches the results of store probes.
type probes struct {
	mu   sync.Mutex
	last map[string]probeResult
}

type probeResult struct {
	at  time.Time
	err error
}

// probe reads one counter of the namespace's store (a key no one writes),
// or returns the result of a probe younger than probeEvery.
func (p *probes) probe(cfg namespace.Config, now time.Time) error {
	p.mu.Lock()
	if r, ok := p.last[cfg.Name]; ok && now.Sub(r.at) < probeEvery && now.Sub(r.at) >= 0 {
		p.mu.Unlock()
		return r.err
	}
	p.mu.Unlock()
	size := cfg.WindowSizes[0]
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	_, err := cfg.Strategy.GetWindow(ctx, cfg.Name, probeKey, arith.WindowStart(now, size), size)
	p.mu.Lock()
	if p.last == nil {
		p.last = map[string]probeResult{}
	}
	p.last[cfg.Name] = probeResult{now, err}
	p.mu.Unlock()
	return err
}
