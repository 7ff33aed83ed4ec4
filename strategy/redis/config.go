package redis

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Defaults for Config's zero values.
const (
	DefaultPrefix           = "ratesync"
	DefaultShards           = 16
	DefaultTTLMargin        = 5 * time.Second
	DefaultLaneTTL          = 24 * time.Hour
	DefaultTimeout          = 5 * time.Second
	DefaultScanThreshold    = 1000
	DefaultFieldsPerCommand = 1000

	// MaxShards bounds Config.Shards: a whole-namespace read touches
	// Shards hashes per window.
	MaxShards = 1024
)

// Config configures a Store. Its zero value means the defaults; every field
// is independent. Nodes sharing a store must agree on Prefix and Shards (New
// refuses a Shards that differs from the one recorded under Prefix); the
// other fields are local to each node.
type Config struct {
	// Prefix starts every key the store writes ("ratesync" when empty): one
	// Redis database can hold several independent stores under different
	// prefixes. Any bytes but '{' and '}', which would break the Cluster hash
	// tags.
	Prefix string

	// Shards is the number of hashes one window of a namespace is split
	// into, by a hash of the key (DefaultShards when 0; 1 to MaxShards).
	// More shards spread a busy window over more Cluster slots and nodes, and
	// keep each script of a push short (Redis runs one at a time); fewer
	// shards mean fewer commands per push (one script per shard a batch
	// touches), fewer hashes per whole-namespace read and fewer lane records.
	// A coalesced synchronous call over many keys touches most shards, and
	// each costs two or three commands inside its script (its windows read,
	// the current one written); with 1 it touches one (a prefix of its own
	// keeps that layout apart), which costs Redis less per decision
	// (BENCHMARKS.md). A periodic push of many keys
	// is then one long script.
	// Every node must use the same value: changing it moves keys to other
	// hashes, so counts of running windows are lost to readers.
	Shards int

	// TTLMargin is how long a window outlives the end of its life as a
	// previous window: a window of size S starting at T expires at
	// T + 2S + TTLMargin, by the clock of the node whose write made it
	// (T + S + W + TTLMargin when it is read over a span W:
	// strategy.Diff.Span, a precision limit), and at least TTLMargin after
	// that write (DefaultTTLMargin when 0; at least 1ms).
	// Longer tolerates more clock skew between nodes; shorter frees memory
	// sooner (with 1s windows, each extra second keeps one more window).
	TTLMargin time.Duration

	// LaneTTL is how long the record of a push lane's last applied Seq is
	// kept after its last apply (DefaultLaneTTL when 0; at least 1s). A retry
	// of a batch arriving later than that after its first try would be
	// counted again, so it must exceed the longest time a batch stays in
	// flight; longer keeps records of departed nodes longer (about 100 bytes
	// per node and namespace shard).
	LaneTTL time.Duration

	// Timeout bounds each call whose context has no deadline
	// (DefaultTimeout when 0). Shorter gives up sooner on a stalled server;
	// a call whose context has a deadline uses that deadline instead.
	Timeout time.Duration

	// ScanThreshold is the number of fields above which a whole-namespace
	// read pages through a hash with HSCAN instead of one HGETALL
	// (DefaultScanThreshold when 0). Higher means fewer round trips for big
	// windows; lower keeps each command, and so each stall of Redis, short.
	ScanThreshold int

	// FieldsPerCommand is the most fields one HMGET asks for, and the COUNT
	// hint of HSCAN (DefaultFieldsPerCommand when 0). Commands are pipelined
	// either way: higher means fewer commands, lower keeps each short.
	FieldsPerCommand int
}

// FieldError is a Config that Validate rejects: it names the field (as Go
// code and as configuration files name it), the value and what is allowed.
type FieldError struct {
	Field   string // the Go field: "Shards"
	Key     string // the same field as configuration files name it: "shards"
	Value   string
	Allowed string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("redis: Config.%s = %s: %s", e.Field, e.Value, e.Allowed)
}

// Validate reports every invalid field of c, each a *FieldError, joined
// with errors.Join (errors.As finds the first), or nil. Zero fields are
// valid: they mean the defaults.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, key string, value any, allowed string) {
		errs = append(errs, &FieldError{Field: field, Key: key, Value: fmt.Sprint(value), Allowed: allowed})
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		bad("Prefix", "prefix", fmt.Sprintf("%q", c.Prefix), "must not contain '{' or '}' (they delimit Cluster hash tags)")
	}
	if c.Shards < 0 || c.Shards > MaxShards {
		bad("Shards", "shards", c.Shards, fmt.Sprintf("must be 0 (default %d) or 1 to %d", DefaultShards, MaxShards))
	}
	if c.TTLMargin != 0 && c.TTLMargin < time.Millisecond {
		bad("TTLMargin", "ttl_margin", c.TTLMargin, fmt.Sprintf("must be 0 (default %s) or at least 1ms", short(DefaultTTLMargin)))
	}
	if c.LaneTTL != 0 && c.LaneTTL < time.Second {
		bad("LaneTTL", "lane_ttl", c.LaneTTL, fmt.Sprintf("must be 0 (default %s) or at least 1s", short(DefaultLaneTTL)))
	}
	if c.Timeout < 0 {
		bad("Timeout", "timeout", c.Timeout, fmt.Sprintf("must be 0 (default %s) or positive", short(DefaultTimeout)))
	}
	if c.ScanThreshold < 0 {
		bad("ScanThreshold", "scan_threshold", c.ScanThreshold, fmt.Sprintf("must be 0 (default %d) or positive", DefaultScanThreshold))
	}
	if c.FieldsPerCommand < 0 {
		bad("FieldsPerCommand", "fields_per_command", c.FieldsPerCommand, fmt.Sprintf("must be 0 (default %d) or positive", DefaultFieldsPerCommand))
	}
	return errors.Join(errs...)
}

// withDefaults validates c and returns it with its zero fields set to the
// defaults.
func (c Config) withDefaults() (Config, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Shards == 0 {
		c.Shards = DefaultShards
	}
	if c.TTLMargin == 0 {
		c.TTLMargin = DefaultTTLMargin
	}
	if c.LaneTTL == 0 {
		c.LaneTTL = DefaultLaneTTL
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ScanThreshold == 0 {
		c.ScanThreshold = DefaultScanThreshold
	}
	if c.FieldsPerCommand == 0 {
		c.FieldsPerCommand = DefaultFieldsPerCommand
	}
	return c, nil
}

// short formats d as configuration files write it: 24h, not 24h0m0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
