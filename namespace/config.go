// Package namespace owns a namespace's configuration and the one definition
// of what a valid configuration is. It does not count, sync or store: the
// ratelimiting package applies a Config, the syncer runs it.
package namespace

import (
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
	WindowSizes []time.Duration   // window sizes this namespace syncs; whole milliseconds, > 0
	// NearLimit (periodic namespaces whose Strategy implements
	// strategy.Checker) decides a request in the store, atomically with its
	// count, when a key's rate is within reach of a limit: within twice what
	// the cluster can admit in one sync interval and one store round trip.
	// Far from their limits keys stay local. Costs a store round trip per
	// request near a limit; bounds over-admission far below Kong's periodic
	// mode (README, BENCHMARKS.md). Default off: Kong's behaviour.
	NearLimit bool
	// DictCapacity bounds the counters of Dict (0: the dict's current bound,
	// shm.DefaultCapacity for a new dict). Higher holds more keys exactly;
	// lower bounds memory (about 100 bytes a counter).
	DictCapacity int
}

// FieldError is a Config that Validate rejects: it names the field, the
// value given and what is allowed.
type FieldError struct {
	Namespace string
	Field     string
	Value     string
	Allowed   string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("namespace %q: %s = %s: %s", e.Namespace, e.Field, e.Value, e.Allowed)
}

// Local reports whether the namespace never syncs.
func (c Config) Local() bool { return c.SyncRate < 0 }

// Validate reports the first invalid field of c as a *FieldError, or nil.
// Duplicate window sizes are valid: Normalize keeps one of each.
func (c Config) Validate() error {
	name := c.Name
	if name == "" {
		name = DefaultName
	}
	bad := func(field, value, allowed string) error {
		return &FieldError{Namespace: name, Field: field, Value: value, Allowed: allowed}
	}
	if strings.Contains(c.Name, "|") {
		return bad("Name", fmt.Sprintf("%q", c.Name), "must not contain '|'")
	}
	if !utf8.ValidString(c.Name) || strings.ContainsRune(c.Name, 0) {
		return bad("Name", fmt.Sprintf("%q", c.Name), "must be valid UTF-8 without NUL (stores keep it as text)")
	}
	if strings.Contains(c.Dict, "|") {
		return bad("Dict", fmt.Sprintf("%q", c.Dict), "must not contain '|'")
	}
	if c.SyncRate > 0 && c.SyncRate < MinSyncRate {
		return bad("SyncRate", c.SyncRate.String(), "must be at least 1ms when periodic (> 0), 0 for synchronous, or < 0 for local only")
	}
	if c.SyncRate >= 0 && c.Strategy == nil {
		return bad("Strategy", "nil", fmt.Sprintf("a strategy is required with SyncRate %v (>= 0); use a negative SyncRate for local-only counting", c.SyncRate))
	}
	if len(c.WindowSizes) == 0 {
		return bad("WindowSizes", "[]", "at least one window size is required")
	}
	for i, s := range c.WindowSizes {
		if s <= 0 || s%time.Millisecond != 0 {
			return bad(fmt.Sprintf("WindowSizes[%d]", i), s.String(), "must be > 0 and a whole number of milliseconds")
		}
	}
	if c.NearLimit && c.SyncRate <= 0 {
		return bad("NearLimit", "true", fmt.Sprintf("needs a periodic SyncRate (> 0), not %v: synchronous namespaces decide in the store always, local ones never", c.SyncRate))
	}
	if c.NearLimit {
		if _, ok := c.Strategy.(strategy.Checker); !ok {
			return bad("NearLimit", "true", fmt.Sprintf("needs a Strategy that implements strategy.Checker; %T does not", c.Strategy))
		}
	}
	if c.DictCapacity < 0 {
		return bad("DictCapacity", fmt.Sprint(c.DictCapacity), "must be >= 0 (0 keeps the dict's bound)")
	}
	return nil
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
