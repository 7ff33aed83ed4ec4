package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/redis"
)

// Time is the server's clock (TIME): the test's servers run on this
// machine, so it reads between the node's clock before and after the call.
// On a Cluster, one master answers.
func TestTimeIsTheServers(t *testing.T) {
	clients := map[string]goredis.UniversalClient{"standalone": testenv.NewRedis(t).Client(t)}
	if !testing.Short() {
		clients["cluster"] = testenv.RedisCluster(t).Client(t)
	}
	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			var s strategy.Clock = storeOn(t, c, testenv.Name("t"), redis.Config{})
			for range 3 {
				before := time.Now()
				got, err := s.Time(context.Background())
				after := time.Now()
				if err != nil {
					t.Fatalf("Time: %v", err)
				}
				const slack = 100 * time.Millisecond // TIME's microseconds, and clock adjustments
				if got.Before(before.Add(-slack)) || got.After(after.Add(slack)) {
					t.Fatalf("Time = %v, not between %v and %v", got, before, after)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := s.Time(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("Time with a canceled context = %v, want context.Canceled", err)
			}
		})
	}
}
