package ratelimiting

import (
	"time"

	"github.com/ratesync/ratesync/namespace"
)

// NamespaceStats is a snapshot of one namespace.
type NamespaceStats struct {
	Config namespace.Config
	Dict   DictStats
	Sync   SyncStats  // zero for a local-only namespace
	Leases LeaseStats // zero unless the namespace is leased
	// Nodes is how many nodes (this one included) the namespace saw using
	// its store recently: what StoreDownShare divides each limit by while
	// the store does not answer. 0 for a local-only namespace.
	Nodes int
}

// DictStats is a snapshot of the dict a namespace counts in.
type DictStats struct {
	Name      string
	Capacity  int
	Entries   int    // live counters
	Evictions uint64 // counters evicted to make room
	Overflows uint64 // counters not created because the dict was full
	Expired   uint64 // counters dropped with their expired window
}

// SyncStats is a snapshot of a namespace's traffic with its store. Its
// times are read from the instance's clock.
type SyncStats struct {
	LastGood      time.Time // end of the last successful exchange with the store
	LastError     error
	LastErrorAt   time.Time
	StoreUp       bool   // the store answers: no exchange failed or hangs since the last that succeeded
	InFlight      int    // batches pushed and not acknowledged (>= 0)
	InFlightDiffs int    // diffs in those batches (>= 0)
	InDoubt       int    // check calls the store may have applied, to be sent again
	Dirty         int    // counters listed with a diff to push
	Pushes        uint64 // batches acknowledged
	Checks        uint64 // check calls answered by the store
	PushErrors    uint64
	FetchErrors   uint64
	LateDropped   uint64 // diffs dropped because their window was over
	LocalHits     uint64 // synchronous hits counted locally while the store failed

	// The store's clock: its time minus the node's, as last estimated; 0
	// until measured, and for stores that do not tell time.
	ClockOffset   time.Duration
	ClockMeasured bool // the store tells time and ClockOffset was measured
}

// SyncReport describes one exchange with a store (WithSyncObserver).
type SyncReport struct {
	Namespace string
	Op        string // "sync", "fetch", "hits", "checks", "purge"
	Duration  time.Duration
	Pushed    int // diffs pushed
	Fetched   int // counters read
	Late      int // late diffs dropped
	Err       error
}
