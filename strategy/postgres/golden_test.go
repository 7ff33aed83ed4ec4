package postgres_test

import (
	"testing"

	"github.com/ratesync/ratesync/internal/refmodel"
	"github.com/ratesync/ratesync/strategy/postgres"
)

// TestGolden runs the golden table of internal/refmodel on PostgreSQL:
// synchronous namespaces, whose every request with a cost, or with an
// anchored window or a log, its check function decides (one key, eight
// keys at once, several checks of one key in one call), and periodic ones,
// whose pushes its functions apply. Each decision must be the table's.
func TestGolden(t *testing.T) {
	refmodel.RunGoldenSuite(t, func(t *testing.T) refmodel.Store {
		store, _ := newStore(t, postgres.Config{})
		return store
	})
}

// TestLeased runs random traces of every leasable algorithm through
// several nodes of a leased namespace on the store: what they admit
// between them must be what one exact limiter could admit.
func TestLeased(t *testing.T) {
	store, _ := newStore(t, postgres.Config{})
	refmodel.RunLeased(t, store, 2)
}
