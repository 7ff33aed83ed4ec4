// Package integration runs several ratesync nodes against one store and
// measures what they admit: the harness (in-process Instances and cmd/node
// processes), the load driver, and the figures the accuracy tool and the
// integration tests report. It is test and tool code; the library does not
// import it.
package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
)

// ClusterConfig describes N in-process nodes sharing one store.
type ClusterConfig struct {
	Nodes       int
	Namespace   string                // "accuracy" when empty
	SyncRate    time.Duration         // the namespace's SyncRate on every node
	Strategy    strategy.Strategy     // the shared store; nil for local-only nodes
	WindowSizes []time.Duration       // the namespace's window sizes
	Skew        []time.Duration       // per node: its clock runs this far ahead (may be shorter than Nodes)
	Clock       namespace.Clock       // namespace.Config.Clock on every node: store (default) or node
	NearLimit   bool                  // namespace.Config.NearLimit on every node
	Leases      bool                  // namespace.Config.Leases on every node
	StoreDown   namespace.StoreDown   // namespace.Config.StoreDown on every node
	Logger      *slog.Logger          // discard when nil
	Options     []ratelimiting.Option // extra options for every node
}

// Cluster is N in-process nodes, each an Instance with its own node
// identity, counting one namespace on one store.
type Cluster struct {
	cfg   ClusterConfig
	Nodes []*ratelimiting.Instance
}

// NewCluster starts the nodes.
func NewCluster(cfg ClusterConfig) (*Cluster, error) {
	if cfg.Nodes <= 0 {
		return nil, fmt.Errorf("integration: Nodes = %d: must be > 0", cfg.Nodes)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "accuracy"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{cfg: cfg}
	for i := range cfg.Nodes {
		var skew time.Duration
		if i < len(cfg.Skew) {
			skew = cfg.Skew[i]
		}
		opts := append([]ratelimiting.Option{
			ratelimiting.WithNodeID(fmt.Sprintf("node-%d", i)),
			ratelimiting.WithLogger(cfg.Logger),
			ratelimiting.WithClock(func() time.Time { return time.Now().Add(skew) }),
		}, cfg.Options...)
		in := ratelimiting.NewInstance(fmt.Sprintf("node-%d", i), opts...)
		rate := cfg.SyncRate
		if cfg.Strategy == nil {
			rate = namespace.LocalOnly
		}
		err := in.New(namespace.Config{
			Name:        cfg.Namespace,
			SyncRate:    rate,
			Strategy:    cfg.Strategy,
			WindowSizes: cfg.WindowSizes,
			NearLimit:   cfg.NearLimit,
			Leases:      cfg.Leases,
			StoreDown:   cfg.StoreDown,
			Clock:       cfg.Clock,
		})
		if err != nil {
			_ = in.Close(context.Background())
			_ = c.Close(context.Background())
			return nil, err
		}
		c.Nodes = append(c.Nodes, in)
	}
	return c, nil
}

// Namespace returns the namespace the nodes count in.
func (c *Cluster) Namespace() string { return c.cfg.Namespace }

// Config returns the cluster's configuration.
func (c *Cluster) Config() ClusterConfig { return c.cfg }

// Sync makes every node push and fetch once, in order.
func (c *Cluster) Sync(ctx context.Context) error {
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.Sync(ctx, c.cfg.Namespace))
	}
	return errors.Join(errs...)
}

// Close closes every node (final syncs included).
func (c *Cluster) Close(ctx context.Context) error {
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.Close(ctx))
	}
	return errors.Join(errs...)
}
