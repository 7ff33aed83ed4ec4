package postgres

import (
	"context"
	"time"

	"github.com/ratesync/ratesync/strategy"
)

var _ strategy.Clock = (*Store)(nil)

// Time returns the server's time, clock_timestamp() (the time the statement
// runs, not its transaction's start as now() is): the common clock of the
// nodes' windows (strategy.Clock).
func (s *Store) Time(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	var t time.Time
	if err := s.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t); err != nil {
		return time.Time{}, dbErr(ctx, "read the server's clock", err)
	}
	return t, nil
}
