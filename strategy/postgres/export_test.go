package postgres

import (
	"context"

	"github.com/ratesync/ratesync/strategy"
)

// GetKeysSQL is the statement GetCounters runs for a Query with Keys.
func (s *Store) GetKeysSQL() string { return s.q.getKeys }

// CheckAndCountOf005 is CheckAndCount as a node of the release of
// migration 005 runs it: with that migration's function, which keeps no
// decisions.
func (s *Store) CheckAndCountOf005(ctx context.Context, node string, seq uint64, checks []strategy.Check) ([]strategy.CheckResult, error) {
	return s.checkAndCount(ctx, checkCall(s.cfg.names(), ""), node, seq, checks)
}
