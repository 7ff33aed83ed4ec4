package redis

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/strategy"
)

var _ strategy.Clock = (*Store)(nil)

// Time returns the server's time (TIME): the common clock of the nodes'
// windows (strategy.Clock). On a Cluster it asks the primary that holds the
// layout record's slot, so that successive calls read one server's clock
// (any node's would do, but samples from several clocks would make the
// offset estimate jump between them); after a failover, the new primary.
func (s *Store) Time(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := s.call(ctx, func() string { return "TIME" }, func(ctx context.Context) error {
		var c goredis.Cmdable = s.c
		if cc, ok := s.c.(*goredis.ClusterClient); ok {
			node, err := cc.MasterForKey(ctx, s.layoutKey())
			if err != nil {
				return err
			}
			c = node
		}
		v, err := c.Time(ctx).Result()
		if err != nil {
			return err
		}
		t = v
		return nil
	})
	if err != nil {
		return time.Time{}, err
	}
	return t, nil
}
