package redis_test

import (
	"testing"

	"github.com/ratesync/ratesync/internal/refmodel"
	"github.com/ratesync/ratesync/strategy/redis"
)

// TestGolden runs the golden table of internal/refmodel through a
// synchronous namespace on Redis: every request with a cost, or with an
// anchored window or a log, is decided by its Lua scripts, and each decision must be the table's.
func TestGolden(t *testing.T) {
	store, _ := newStore(t, redis.Config{})
	refmodel.RunGolden(t, store)
}

// TestGoldenTogether runs the golden table on eight keys at once: the
// syncer sends the checks of a step together, and the scripts decide
// several checks in one call.
func TestGoldenTogether(t *testing.T) {
	store, _ := newStore(t, redis.Config{})
	refmodel.RunGoldenTogether(t, store, 8)
}

// TestGoldenCalls runs the golden table through CheckAndCount itself, the
// steps of one instant in one call: the scripts decide several checks of
// one key in one call.
func TestGoldenCalls(t *testing.T) {
	store, _ := newStore(t, redis.Config{})
	refmodel.RunGoldenCalls(t, store)
}

// TestGoldenPeriodic runs the golden table's cases of windows and buckets
// through a periodic namespace synced after each step: the scripts apply
// the node's diffs, and the node decides on what they made.
func TestGoldenPeriodic(t *testing.T) {
	store, _ := newStore(t, redis.Config{})
	refmodel.RunGoldenPeriodic(t, store)
}
