package postgres

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Defaults for Config's zero values.
const (
	DefaultSchema     = "public"
	DefaultTable      = "ratesync_counters"
	DefaultLaneTable  = "ratesync_lanes"
	DefaultPurgeBatch = 1000
	DefaultLaneTTL    = 24 * time.Hour
)

// Names derived from Config.Table: the schema version table, the function
// CheckAndCount calls, the buckets table, the function that applies
// bucket diffs, the anchored windows table, and the sliding logs' headers
// and entries tables. Table is at most maxTable bytes so that they stay
// within PostgreSQL's 63-byte identifiers (no suffix is longer than
// versionSuffix).
const (
	versionSuffix    = "_migrations"
	checkSuffix      = "_check"
	bucketsSuffix    = "_buckets"
	bucketAddSuffix  = "_bucket_add"
	anchoredSuffix   = "_anchored"
	logsSuffix       = "_logs"
	logEntriesSuffix = "_logentries"
	maxIdent         = 63
	maxTable         = maxIdent - len(versionSuffix)
)

// Config configures a Store. Its zero value is valid: every field has a
// documented default.
type Config struct {
	// Schema holds the store's tables and function; created when missing.
	// Default "public". A schema of its own keeps the store's objects apart
	// from the application's and lets one database serve several clusters.
	Schema string

	// Table is the counters table. Default "ratesync_counters". The schema
	// version table is Table+"_migrations", CheckAndCount's function
	// Table+"_check", the buckets table Table+"_buckets" and its function
	// Table+"_bucket_add", the anchored windows table Table+"_anchored",
	// the sliding logs' tables Table+"_logs" and Table+"_logentries", so
	// Table is at most 52 bytes. Two Stores with different Tables are two
	// independent stores in one schema.
	Table string

	// LaneTable records the last batch applied per push lane (Batch.Node).
	// Default "ratesync_lanes". One row per lane: nodes × namespaces, plus
	// the lanes of restarted processes until Purge removes them.
	LaneTable string

	// PurgeBatch is the number of rows one DELETE statement of Purge removes.
	// Default 1000. Larger purges a backlog in fewer round trips; smaller
	// keeps each statement's row locks and WAL burst shorter.
	PurgeBatch int

	// LaneTTL is how long a lane that applied nothing is kept; Purge deletes
	// older ones. Default 24h. A batch retried after its lane was deleted
	// would be counted again, so keep it far above any retry horizon;
	// shorter keeps the lane table smaller when processes restart often.
	LaneTTL time.Duration

	// Logger receives what the store reports on its own, beside the errors
	// its calls return: the schema migrated (INFO), and a migration the
	// server refuses (WARN, once for each new reason). Default
	// slog.Default().
	Logger *slog.Logger
}

// logger returns c.Logger, or slog.Default() when it is nil.
func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// identRE is what a schema or table name may be: a lowercase unquoted SQL
// identifier, so that the name a user types in psql is the name we create.
var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// withDefaults returns c with its zero fields set to the defaults.
func (c Config) withDefaults() Config {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.LaneTable == "" {
		c.LaneTable = DefaultLaneTable
	}
	if c.PurgeBatch == 0 {
		c.PurgeBatch = DefaultPurgeBatch
	}
	if c.LaneTTL == 0 {
		c.LaneTTL = DefaultLaneTTL
	}
	return c
}

// FieldError is a Config that Validate rejects: it names the field (as Go
// code and as configuration files name it), the value and what is allowed.
type FieldError struct {
	Field   string // the Go field: "LaneTable"
	Key     string // the same field as configuration files name it: "lane_table"
	Value   string
	Allowed string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("postgres: Config.%s = %q: %s", e.Field, e.Value, e.Allowed)
}

// Validate reports every invalid field of c, each a *FieldError, joined
// with errors.Join (errors.As finds the first), or nil. Zero fields are
// valid: they mean the defaults.
func (c Config) Validate() error {
	return c.withDefaults().validate()
}

// validate reports every invalid field of c (with defaults applied).
func (c Config) validate() error {
	var errs []error
	bad := func(field, key string, value any, allowed string) {
		errs = append(errs, &FieldError{Field: field, Key: key, Value: fmt.Sprint(value), Allowed: allowed})
	}
	ident := func(field, key, name string, max int) bool {
		if !identRE.MatchString(name) || len(name) > max {
			bad(field, key, name, fmt.Sprintf("must match %s and be at most %d bytes", identRE, max))
			return false
		}
		return true
	}
	ident("Schema", "schema", c.Schema, maxIdent)
	tableOK := ident("Table", "table", c.Table, maxTable)
	if ident("LaneTable", "lane_table", c.LaneTable, maxIdent) && tableOK {
		derived := []string{c.Table + versionSuffix, c.Table + checkSuffix, c.Table + bucketsSuffix, c.Table + bucketAddSuffix,
			c.Table + anchoredSuffix, c.Table + logsSuffix, c.Table + logEntriesSuffix}
		if c.LaneTable == c.Table || slices.Contains(derived, c.LaneTable) {
			bad("LaneTable", "lane_table", c.LaneTable, fmt.Sprintf("must differ from the table name %q and the names derived from it (%q)", c.Table, strings.Join(derived, `", "`)))
		}
	}
	if c.PurgeBatch < 0 {
		bad("PurgeBatch", "purge_batch", c.PurgeBatch, fmt.Sprintf("must be > 0 (0 means %d)", DefaultPurgeBatch))
	}
	switch {
	case c.LaneTTL < 0:
		bad("LaneTTL", "lane_ttl", c.LaneTTL, fmt.Sprintf("must be > 0 (0 means %s)", short(DefaultLaneTTL)))
	case c.LaneTTL%time.Millisecond != 0:
		bad("LaneTTL", "lane_ttl", c.LaneTTL, "must be a whole number of milliseconds")
	}
	return errors.Join(errs...)
}

// names are the quoted, schema-qualified identifiers of the store's
// objects, ready to put in SQL text. They come from validated names only.
type names struct {
	counters, lanes, versions, check string
	buckets, bucketAdd               string
	anchored, logs, logEntries       string
}

func (c Config) names() names {
	q := func(name string) string { return pgx.Identifier{c.Schema, name}.Sanitize() }
	return names{
		counters:   q(c.Table),
		lanes:      q(c.LaneTable),
		versions:   q(c.Table + versionSuffix),
		check:      q(c.Table + checkSuffix),
		buckets:    q(c.Table + bucketsSuffix),
		bucketAdd:  q(c.Table + bucketAddSuffix),
		anchored:   q(c.Table + anchoredSuffix),
		logs:       q(c.Table + logsSuffix),
		logEntries: q(c.Table + logEntriesSuffix),
	}
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
