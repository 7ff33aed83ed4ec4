package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/middleware"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/rls"
)

// Server timeouts of the API listener: a client cannot hold a connection
// or a handler by sending slowly.
const (
	apiReadHeaderTimeout = 5 * time.Second
	apiReadTimeout       = 10 * time.Second
	apiWriteTimeout      = 10 * time.Second
	apiIdleTimeout       = 60 * time.Second
	startSyncTimeout     = 5 * time.Second
	adminSyncTimeout     = 30 * time.Second
)

// Node is the limiter node: a ratelimiting.Instance with the namespaces of
// its config, the stores they sync with, the policies, the HTTP API and the
// optional gateway. Build it with newNode, run it with Serve; reload applies
// a new configuration while it serves (reload.go).
type Node struct {
	cfg       config.Config // as started: the listeners, node.id and log format, which a reload keeps
	live      atomic.Pointer[live]
	log       *slog.Logger
	in        *ratelimiting.Instance
	metrics   *metrics
	api       http.Handler
	gateway   *gateway     // nil without a gateway section
	rls       *rls.Service // nil without an rls section
	probes    probes       // store probes of /readyz
	adminOpen atomic.Bool  // admin endpoints need no token: none set, loopback listener
	loopback  atomic.Bool  // the API listens on loopback only
	closing   atomic.Bool  // shutting down: not ready
	flushing  atomic.Bool  // counting the diffs the final sync pushes
	flushed   atomic.Int64
	rlsLn     net.Listener // the rls section's gRPC listener, set by Serve (tests set it)
	reloader               // what reload needs: the source of configurations, the lock
}

// live is what a reload replaces: the configuration in force and what is
// built from it. Requests read it with one atomic load; it is never changed
// in place.
type live struct {
	cfg        config.Config
	policies   map[string]*policy          // by name
	nsOutcomes map[string]*outcomeCounters // decision counters of /v1/check's namespace form
	headers    middleware.HeaderOptions
}

// state returns the configuration in force and what is built from it.
func (n *Node) state() *live { return n.live.Load() }

// policy is a configured policy and the limiter that enforces it.
type policy struct {
	cfg      config.PolicyConfig
	lim      *middleware.Limiter
	outcomes *outcomeCounters
}

// newNode builds the node of cfg: stores connected, namespaces created,
// policies and routes ready, a first sync of every namespace with a store
// attempted. It does not listen. opts are added to the options of the
// node's ratelimiting.Instance (tests give it a clock).
func newNode(ctx context.Context, cfg config.Config, log *slog.Logger, opts ...ratelimiting.Option) (*Node, error) {
	n := &Node{
		cfg:     cfg,
		log:     log,
		metrics: newMetrics(),
	}
	n.loopback.Store(isLoopback(cfg.Node.Listen))
	n.adminOpen.Store(cfg.Node.AdminToken == "" && n.loopback.Load())
	st, probed, err := openStores(ctx, cfg, log, nil, cfg.RequireStores)
	if err != nil {
		return nil, err
	}
	var down []error
	for _, p := range probed {
		if p.err != nil {
			down = append(down, fmt.Errorf("%s: the store does not answer: %s", storeDesc(p.ns), config.MaskSecrets(p.err.Error(), p.ns.URL)))
		}
	}
	if len(down) > 0 {
		st.close()
		return nil, fmt.Errorf("require_stores: %w", errors.Join(down...))
	}
	n.stores = st
	n.in = ratelimiting.NewInstance("ratesync-node", append([]ratelimiting.Option{
		ratelimiting.WithNodeID(cfg.Node.ID),
		ratelimiting.WithLogger(log),
		ratelimiting.WithSyncObserver(n.observeSync)}, opts...)...)
	fail := func(err error) (*Node, error) {
		_ = n.in.Close(context.Background())
		st.close()
		return nil, err
	}
	for _, ns := range cfg.Namespaces {
		if err := n.in.New(ns.Namespace(st.byNamespace[ns.Name])); err != nil {
			return fail(fmt.Errorf("namespace %q: %w", ns.Name, err))
		}
	}
	n.metrics.watch(n.in)
	l, err := n.build(cfg)
	if err != nil {
		return fail(err)
	}
	if cfg.Gateway != nil {
		routes, err := newRoutes(*cfg.Gateway, l.policies, n.log, nil)
		if err != nil {
			return fail(err)
		}
		n.gateway = &gateway{}
		n.gateway.routes.Store(routes)
	}
	n.live.Store(l)
	n.rls = n.newRLS()
	n.api = n.routes()
	n.firstSync(ctx)
	return n, nil
}

// build returns the live state of cfg: its policies, on the instance's
// namespaces as they are, and their counters.
func (n *Node) build(cfg config.Config) (*live, error) {
	l := &live{
		cfg:        cfg,
		policies:   map[string]*policy{},
		nsOutcomes: map[string]*outcomeCounters{},
		headers:    headerOptions(cfg.Headers),
	}
	for _, ns := range cfg.Namespaces {
		l.nsOutcomes[ns.Name] = n.metrics.outcomes(ns.Name, "")
	}
	var keyOpts middleware.KeyOptions
	if g := cfg.Gateway; g != nil {
		keyOpts.TrustedProxies, keyOpts.ConsumerHeader = g.Trusted, g.ConsumerHeader
	}
	for _, pc := range cfg.Policies {
		p, err := n.newPolicy(pc, keyOpts, l.headers, cfg.Node.MaxKeyBytes)
		if err != nil {
			return nil, err
		}
		l.policies[pc.Name] = p
	}
	return l, nil
}

func (n *Node) newPolicy(pc config.PolicyConfig, keyOpts middleware.KeyOptions, headers middleware.HeaderOptions, maxKeyBytes int) (*policy, error) {
	if pc.MissingKey == "empty" {
		keyOpts.Fallback = middleware.FallbackEmpty
	}
	key, err := middleware.ParseKey(pc.Key, keyOpts)
	if err != nil {
		return nil, fmt.Errorf("policy %q: %w", pc.Name, err)
	}
	p := &policy{cfg: pc, outcomes: n.metrics.outcomes(pc.Namespace, pc.Name)}
	lim, err := middleware.New(n.in, pc.Policy(key), middleware.Options{
		Headers:       headers,
		DeniedMessage: pc.ErrorMessage,
		MaxKeyBytes:   maxKeyBytes,
		Observe:       func(_ *http.Request, res middleware.Result) { p.outcomes.add(res.Outcome) },
	})
	if err != nil {
		return nil, err
	}
	p.lim = lim
	return p, nil
}

func headerOptions(c config.HeadersConfig) middleware.HeaderOptions {
	o := middleware.HeaderOptions{Hide: c.Hide}
	for _, f := range c.Families {
		switch f {
		case "ratelimit":
			o.Families |= middleware.FamilyRateLimit
		case "x-ratelimit":
			o.Families |= middleware.FamilyXRateLimit
		}
	}
	if o.Families == 0 {
		o.Hide = true // an empty list: no family
	}
	return o
}

// observeSync receives every store exchange of the instance.
func (n *Node) observeSync(r ratelimiting.SyncReport) {
	n.metrics.observeSync(r)
	if n.flushing.Load() && r.Err == nil {
		n.flushed.Add(int64(r.Pushed))
	}
}

// firstSync syncs every namespace with a store once, concurrently, so that
// the node starts with the cluster's counts and /readyz knows the stores.
// It logs "store ready" for each namespace whose store answered. A store
// that did not is not fatal (require_stores has been checked before): the
// node counts locally until it is back, and the syncer has logged its one
// WARN ("store unreachable") for it.
func (n *Node) firstSync(ctx context.Context) {
	var (
		wg   sync.WaitGroup
		errs = make([]error, len(n.cfg.Namespaces))
	)
	for i, ns := range n.cfg.Namespaces {
		if ns.Strategy == config.StrategyLocal {
			continue
		}
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, startSyncTimeout)
			defer cancel()
			errs[i] = n.in.Sync(sctx, ns.Name)
		})
	}
	wg.Wait()
	for i, err := range errs {
		switch ns := &n.cfg.Namespaces[i]; {
		case ns.Strategy == config.StrategyLocal:
		case err == nil:
			logStoreReady(n.log, ns)
		default:
			n.log.Debug("first sync failed: counting locally until the store is back", "namespace", ns.Name, "err", err)
		}
	}
}

// isLoopback reports whether a listen address accepts loopback
// connections only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve listens on the configured addresses and serves until ctx is done,
// then shuts down: see shutdown.
func (n *Node) Serve(ctx context.Context) error {
	apiLn, err := net.Listen("tcp", n.cfg.Node.Listen)
	if err != nil {
		n.close(context.Background())
		return fmt.Errorf("listen: %w", err)
	}
	var gwLn net.Listener
	if n.gateway != nil {
		if gwLn, err = net.Listen("tcp", n.cfg.Gateway.Listen); err != nil {
			_ = apiLn.Close()
			n.close(context.Background())
			return fmt.Errorf("gateway listen: %w", err)
		}
	}
	rlsLn, err := n.listenRLS()
	if err != nil {
		_ = apiLn.Close()
		if gwLn != nil {
			_ = gwLn.Close()
		}
		n.close(context.Background())
		return fmt.Errorf("rls listen: %w", err)
	}
	n.rlsLn = rlsLn
	return n.ServeListeners(ctx, apiLn, gwLn)
}

// ServeListeners serves the API on apiLn and the gateway on gwLn (nil
// without a gateway) until ctx is done or a server fails, then shuts down.
func (n *Node) ServeListeners(ctx context.Context, apiLn, gwLn net.Listener) error {
	n.loopback.Store(isLoopback(apiLn.Addr().String()))
	n.adminOpen.Store(n.state().cfg.Node.AdminToken == "" && n.loopback.Load())
	if !n.adminOpen.Load() && n.state().cfg.Node.AdminToken == "" {
		n.log.Warn("admin endpoints disabled: the API listens beyond loopback and no admin token is set (node.admin_token or " + config.EnvAdminToken + ")")
	}
	errLog := slog.NewLogLogger(n.log.Handler(), slog.LevelWarn)
	servers := []*http.Server{{
		Handler:           n.api,
		ReadHeaderTimeout: apiReadHeaderTimeout,
		ReadTimeout:       apiReadTimeout,
		WriteTimeout:      apiWriteTimeout,
		IdleTimeout:       apiIdleTimeout,
		MaxHeaderBytes:    serverMaxHeaderBytes,
		ErrorLog:          errLog,
	}}
	lns := []net.Listener{apiLn}
	n.log.Info("listening", "url", "http://"+apiLn.Addr().String(), "admin", n.adminMode())
	if gwLn != nil {
		g := n.cfg.Gateway
		exchange := time.Duration(g.ConnectTimeout + 2*g.Timeout)
		servers = append(servers, &http.Server{
			Handler:           n.gateway,
			ReadHeaderTimeout: apiReadHeaderTimeout,
			ReadTimeout:       exchange,
			WriteTimeout:      exchange,
			IdleTimeout:       apiIdleTimeout,
			MaxHeaderBytes:    serverMaxHeaderBytes,
			ErrorLog:          errLog,
		})
		lns = append(lns, gwLn)
		n.log.Info("gateway listening", "url", "http://"+gwLn.Addr().String(), "upstream", g.Upstream)
	}
	errc := make(chan error, len(servers)+1)
	for i, srv := range servers {
		go func() { errc <- srv.Serve(lns[i]) }()
	}
	var grpcSrv *rlsServer
	if n.rlsLn != nil && n.rls != nil {
		grpcSrv = n.newRLSServer()
		go func() { errc <- grpcSrv.srv.Serve(n.rlsLn) }()
		n.log.Info("rls listening", "address", n.rlsLn.Addr().String(), "config", n.cfg.RLS.Config, "domains", n.rls.Config().Domains())
	}
	var watching sync.WaitGroup
	wctx, stopWatch := context.WithCancel(ctx)
	if n.load != nil {
		watching.Go(func() { n.watch(wctx, n.hup, watchEvery) })
	}
	var cause error
	select {
	case <-ctx.Done():
		n.log.Info("signal received: shutting down", "timeout", time.Duration(n.state().cfg.Node.ShutdownTimeout).String())
	case err := <-errc:
		cause = fmt.Errorf("serve: %w", err)
		n.log.Error("server failed: shutting down", "err", err)
	}
	stopWatch()
	watching.Wait()
	return errors.Join(cause, n.shutdown(servers, grpcSrv))
}

func (n *Node) adminMode() string {
	switch {
	case n.state().cfg.Node.AdminToken != "":
		return "bearer token"
	case n.adminOpen.Load():
		return "open on loopback"
	default:
		return "disabled"
	}
}

// shutdown stops accepting, lets in-flight requests finish within the
// shutdown timeout, then makes the final sync of every namespace within the
// shutdown timeout again and logs how many diffs it flushed.
func (n *Node) shutdown(servers []*http.Server, grpcSrv *rlsServer) error {
	n.closing.Store(true)
	timeout := time.Duration(n.state().cfg.Node.ShutdownTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	var wg sync.WaitGroup
	if grpcSrv != nil {
		wg.Go(func() { grpcSrv.stop(ctx) })
	}
	for _, srv := range servers {
		wg.Go(func() {
			if err := srv.Shutdown(ctx); err != nil {
				n.log.Warn("requests still running at the shutdown deadline: closing their connections", "err", err)
				_ = srv.Close()
			}
		})
	}
	wg.Wait()
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return n.close(ctx)
}

// close makes the final sync (Instance.Close) and closes the stores. It
// waits for a reload under way, and no reload runs after it.
func (n *Node) close(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	pending := n.pendingDiffs()
	n.flushing.Store(true)
	start := time.Now()
	err := n.in.Close(ctx)
	n.stores.close()
	attrs := []any{"pending_before", pending, "flushed", n.flushed.Load(), "duration", time.Since(start).Round(time.Millisecond).String()}
	if err != nil {
		n.log.Error("final sync failed: diffs not pushed are lost", append(attrs, "err", err)...)
		return fmt.Errorf("final sync: %w", err)
	}
	n.log.Info("final sync done: stopped", attrs...)
	return nil
}

// pendingDiffs sums the diffs waiting for a push and those in flight over
// the namespaces.
func (n *Node) pendingDiffs() int {
	total := 0
	for _, st := range n.in.Stats() {
		total += st.Sync.Dirty + st.Sync.InFlightDiffs
	}
	return total
}
