// Package namespace owns a namespace's configuration and the one definition
// of what a valid configuration is. It does not count, sync or store: the
// ratelimiting package applies a Config, the syncer runs it.
package namespace

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ratesync/ratesync/strategy"
)

// SyncRate values with a meaning of their own.
const (
	Synchronous time.Duration = 0  // SyncRate: every increment goes to the store
	LocalOnly   time.Duration = -1 // SyncRate: never sync (any negative value)
)

// Defaults applied by Normalize.
const (
	DefaultName = "default"
	DefaultDict = "default"
)

// MinSyncRate is the shortest periodic sync interval accepted.
const MinSyncRate = time.Millisecond

// MaxWindowSize is the longest window size accepted: 100 years. Window
// arithmetic reaches twice a window past now, in nanoseconds; with this
// bound it stays far inside an int64.
const MaxWindowSize = 876000 * time.Hour

// Config is one namespace's configuration: where its counters live, how
// often they sync, with which store, and which window sizes it keeps.
//
// The zero value is not valid (it has no window sizes). A Config is a value:
// copy it freely; the ratelimiting package copies it on New and Update.
type Config struct {
	Name        string            // "default" when empty; must not contain '|'
	Dict        string            // shm dict the counters live in; namespaces may share one ("default" when empty)
	SyncRate    time.Duration     // > 0 periodic, 0 synchronous, < 0 local only
	Strategy    strategy.Strategy // required unless SyncRate < 0
	WindowSizes []time.Duration   // window sizes this namespace syncs; whole milliseconds, > 0, at most MaxWindowSize
	// NearLimit (periodic namespaces whose Strategy implements
	// strategy.Checker) decides a request in the store, atomically with its
	// count, when a key's rate is within reach of a limit: within twice what
	// the cluster can admit in one sync interval and one store round trip.
	// Far from their limits keys stay local. Costs a store round trip per
	// request near a limit; bounds over-admission far below Kong's periodic
	// mode (docs/guarantees.md, "NearLimit"; BENCHMARKS.md, section 14).
	// Default off: Kong's behaviour.
	NearLimit bool
	// Leases (periodic namespaces whose Strategy implements
	// strategy.Checker and strategy.BucketStore) decides Allow, Check and
	// AllowOne on this node from quota the store granted it: the store
	// counts a grant of k units at once, atomically with its check, and the
	// node admits from what it holds without a store call. The cluster never
	// admits more than a limit, whatever the sync rate (docs/guarantees.md,
	// "Leases"). Increment and SlidingWindow keep counting as periodic
	// diffs. Sliding logs are decided in the store. Exclusive with
	// NearLimit.
	Leases bool
	// StoreDown is what a leased or synchronous namespace decides with
	// when a request needs the store and the store does not answer within
	// Timeout (a leased node first spends the quota it holds): the zero
	// value is StoreDownShare.
	StoreDown StoreDown
	// DictCapacity bounds the counters of Dict (0: the dict's current bound,
	// shm.DefaultCapacity for a new dict). Higher holds more keys exactly;
	// lower bounds memory (about 100 bytes a counter).
	DictCapacity int
	// Timeout is the call timeout of a namespace with a store: the longest
	// a request waits for the store (a synchronous decision, a near-limit
	// check) before it is decided on the node, and the longest a sync may
	// go unanswered before the store counts as down (see docs/guarantees.md,
	// "Fail open in one call timeout"). 0: the instance's
	// (ratelimiting.WithSyncTimeout), 1s by default.
	Timeout time.Duration
	// Clock is the time the namespace counts windows in. StoreClock (the
	// default) is the node's clock plus its measured offset from the
	// store's (when the Strategy is a strategy.Clock), so every node puts
	// a hit in the same window whatever its own clock says; NodeClock is
	// the node's clock alone (a node whose clock is ahead counts in windows
	// the others have not reached). Local-only namespaces, and stores that
	// do not tell time (strategy/memory), count on the node's clock either
	// way.
	Clock Clock
}

// Clock is the time a namespace counts its windows in (Config.Clock).
type Clock uint8

const (
	StoreClock Clock = iota // the node's clock plus its measured offset from the store's (default)
	NodeClock               // the node's clock alone
)

// String returns the clock's name as configuration files spell it: "store"
// or "node".
func (c Clock) String() string {
	switch c {
	case StoreClock:
		return "store"
	case NodeClock:
		return "node"
	}
	return fmt.Sprintf("Clock(%d)", uint8(c))
}

// StoreDown is a namespace's behaviour while its store does not answer
// (Config.StoreDown).
type StoreDown uint8

const (
	// StoreDownShare decides on the node against each limit divided by
	// the number of nodes seen using the store recently (the namespace's
	// own nodes, counted through the store while it answered): N nodes
	// cut off together admit at most the limit between them.
	StoreDownShare StoreDown = iota
	// StoreDownLocal decides on the node against the whole limit: each
	// node may admit it (the limit times the nodes, at most).
	StoreDownLocal
	// StoreDownDeny refuses every request that needs the store.
	StoreDownDeny
)

// String returns the behaviour's name as configuration files spell it:
// "share", "local" or "deny".
func (s StoreDown) String() string {
	switch s {
	case StoreDownShare:
		return "share"
	case StoreDownLocal:
		return "local"
	case StoreDownDeny:
		return "deny"
	}
	return fmt.Sprintf("StoreDown(%d)", uint8(s))
}

// FieldError is a Config that Validate rejects: it names the field, the
// value given and what is allowed.
type FieldError struct {
	Namespace string
	Field     string // the Go field: "SyncRate", "WindowSizes[1]"
	Key       string // the same field as configuration files name it: "sync_rate", "window_sizes[1]"
	Value     string
	Allowed   string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("namespace %q: %s = %s: %s", e.Namespace, e.Field, e.Value, e.Allowed)
}

// Local reports whether the namespace never syncs.
func (c Config) Local() bool { return c.SyncRate < 0 }

// Validate reports every invalid field of c, each a *FieldError, joined
// with errors.Join (errors.As finds the first), or nil.
// Duplicate window sizes are valid: Normalize keeps one of each.
func (c Config) Validate() error {
	name := c.Name
	if name == "" {
		name = DefaultName
	}
	var errs []error
	bad := func(field, key, value, allowed string) {
		errs = append(errs, &FieldError{Namespace: name, Field: field, Key: key, Value: value, Allowed: allowed})
	}
	switch {
	case strings.Contains(c.Name, "|"):
		bad("Name", "name", fmt.Sprintf("%q", c.Name), "must not contain '|'")
	case !utf8.ValidString(c.Name) || strings.ContainsRune(c.Name, 0):
		bad("Name", "name", fmt.Sprintf("%q", c.Name), "must be valid UTF-8 without NUL (stores keep it as text)")
	}
	if strings.Contains(c.Dict, "|") {
		bad("Dict", "dict", fmt.Sprintf("%q", c.Dict), "must not contain '|'")
	}
	switch {
	case c.SyncRate > 0 && c.SyncRate < MinSyncRate:
		bad("SyncRate", "sync_rate", c.SyncRate.String(), "a periodic sync rate (> 0) must be at least 1ms")
	case c.SyncRate >= 0 && c.Strategy == nil:
		bad("Strategy", "strategy", "nil", fmt.Sprintf("a strategy is required with sync rate %v (>= 0); a negative sync rate counts locally only", c.SyncRate))
	}
	if len(c.WindowSizes) == 0 {
		bad("WindowSizes", "window_sizes", "[]", "at least one window size is required")
	}
	if c.Timeout < 0 {
		bad("Timeout", "timeout", c.Timeout.String(), "must be >= 0 (0: the default, 1s)")
	}
	if c.DictCapacity < 0 {
		bad("DictCapacity", "dict_capacity", fmt.Sprint(c.DictCapacity), "must be >= 0 (0 keeps the dict's bound)")
	}
	for i, s := range c.WindowSizes {
		switch {
		case s <= 0 || s%time.Millisecond != 0:
			bad(fmt.Sprintf("WindowSizes[%d]", i), fmt.Sprintf("window_sizes[%d]", i), s.String(), "must be > 0 and a whole number of milliseconds")
		case s > MaxWindowSize:
			bad(fmt.Sprintf("WindowSizes[%d]", i), fmt.Sprintf("window_sizes[%d]", i), s.String(), "must be at most 876000h (100 years)")
		}
	}
	if c.StoreDown > StoreDownDeny {
		bad("StoreDown", "store_down", c.StoreDown.String(), "must be StoreDownShare (share, the default), StoreDownLocal (local) or StoreDownDeny (deny)")
	}
	if c.Clock > NodeClock {
		bad("Clock", "clock", c.Clock.String(), "must be StoreClock (store, the default) or NodeClock (node)")
	}
	c.validateNearLimit(bad)
	c.validateLeases(bad)
	return errors.Join(errs...)
}

// validateNearLimit checks NearLimit against the sync mode and the store.
func (c Config) validateNearLimit(bad func(field, key, value, allowed string)) {
	if !c.NearLimit {
		return
	}
	switch {
	case c.SyncRate < 0:
		bad("NearLimit", "near_limit", "true", "needs a periodic sync rate (sync_rate, SyncRate > 0) and a store; this namespace is local only, and local namespaces never ask the store")
	case c.SyncRate == 0:
		bad("NearLimit", "near_limit", "true", "needs a periodic sync rate (sync_rate, SyncRate > 0); this namespace is synchronous, and synchronous namespaces always decide in the store")
	case c.Strategy == nil:
		// reported above
	default:
		if _, ok := c.Strategy.(strategy.Checker); !ok {
			bad("NearLimit", "near_limit", "true", fmt.Sprintf("needs a strategy that decides in the store (strategy.Checker); %T does not", c.Strategy))
		}
	}
}

// validateLeases checks Leases against the sync mode and the store.
func (c Config) validateLeases(bad func(field, key, value, allowed string)) {
	if !c.Leases {
		return
	}
	switch {
	case c.SyncRate < 0:
		bad("Leases", "leases", "true", "needs a periodic sync rate (sync_rate, SyncRate > 0) and a store; this namespace is local only")
	case c.SyncRate == 0:
		bad("Leases", "leases", "true", "needs a periodic sync rate (sync_rate, SyncRate > 0): returns of unused quota ride the periodic sync; this namespace is synchronous")
	case c.NearLimit:
		bad("Leases", "leases", "true", "leases and near_limit are alternatives: a leased namespace never over-admits, so near_limit has nothing to add; set one")
	case c.Strategy == nil:
		// reported above
	default:
		_, decides := c.Strategy.(strategy.Checker)
		_, keeps := c.Strategy.(strategy.BucketStore)
		if !decides || !keeps {
			bad("Leases", "leases", "true", fmt.Sprintf("needs a strategy that grants quota (strategy.Checker and strategy.BucketStore: memory, Redis, PostgreSQL); %T does not", c.Strategy))
		}
	}
}

// Normalize returns c with defaults applied (Name, Dict) and its window
// sizes sorted ascending with duplicates removed. It does not validate.
func (c Config) Normalize() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Dict == "" {
		c.Dict = DefaultDict
	}
	sizes := slices.Clone(c.WindowSizes)
	slices.Sort(sizes)
	c.WindowSizes = slices.Compact(sizes)
	if c.SyncRate < 0 {
		c.SyncRate = LocalOnly
	}
	return c
}
