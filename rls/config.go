// Package rls reads envoyproxy/ratelimit's configuration files unchanged
// and finds, for a descriptor of Envoy's rate limit service
// (envoy.service.ratelimit.v3), the rate limit that applies to it, with
// that service's rules: its keys, its validation errors and its matching
// order.
//
// A rule is upstream's fixed window of requests_per_unit per unit, unless
// it names an algorithm, ratesync's extension key: sliding (a sliding
// window counter), fixed, anchored (a window opened by a key's first hit),
// sliding_log, token_bucket or leaky_bucket (with a burst). A descriptor
// may also carry more than one rate limit (rate_limits).
package rls

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Unit is a rate limit's unit, as envoyproxy/ratelimit spells them.
type Unit int

// The units, numbered as Envoy's RateLimitResponse.RateLimit.Unit.
const (
	Unknown Unit = iota
	Second
	Minute
	Hour
	Day
	Month // 30 days
	Year  // 365 days
	Week
)

var unitNames = map[string]Unit{"SECOND": Second, "MINUTE": Minute, "HOUR": Hour, "DAY": Day, "WEEK": Week, "MONTH": Month, "YEAR": Year}

// Duration returns the unit's window.
func (u Unit) Duration() time.Duration {
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	case Year:
		return 365 * 24 * time.Hour
	}
	return 0
}

// String returns the unit's name in upper case, as Envoy's enum.
func (u Unit) String() string {
	for n, v := range unitNames {
		if v == u {
			return n
		}
	}
	return "UNKNOWN"
}

// RateLimit is one rule of a configuration.
type RateLimit struct {
	RequestsPerUnit uint32
	Unit            Unit
	Unlimited       bool
	Name            string   // rate_limit.name; "" when unnamed
	Replaces        []string // names of rules this one replaces in a request
	ShadowMode      bool
	DetailedMetric  bool
	QuotaMode       bool
	// FullKey is the rule's place in the configuration: the domain and
	// each level's key (key_value when the level has a value), dotted.
	FullKey string
	// Algorithm and Burst are ratesync's extension keys of a rate_limit:
	// with an algorithm the rule is decided by ratesync's limiter (a
	// denied request is not counted); without one it is upstream's fixed
	// window (every request counted).
	Algorithm Algorithm
	Burst     float64
	// Source is where the rule is written: "file:line".
	Source string
}

// Algorithm is the extension key "algorithm" of a rate_limit.
type Algorithm string

// The algorithms a rate_limit may name, as ratesync's node spells them;
// "" is upstream's fixed window.
const (
	Upstream    Algorithm = ""
	Sliding     Algorithm = "sliding"
	Fixed       Algorithm = "fixed"
	Anchored    Algorithm = "anchored"
	SlidingLog  Algorithm = "sliding_log"
	TokenBucket Algorithm = "token_bucket"
	LeakyBucket Algorithm = "leaky_bucket"
)

var algorithms = []Algorithm{Sliding, Fixed, Anchored, SlidingLog, TokenBucket, LeakyBucket}

// Bucket reports whether a is a token or leaky bucket.
func (a Algorithm) Bucket() bool { return a == TokenBucket || a == LeakyBucket }

// Entry is one entry of a request's descriptor.
type Entry struct {
	Key, Value string
}

// Config is a loaded configuration: rules by domain. It is immutable and
// safe for concurrent use.
type Config struct {
	domains map[string]*level
}

// level is one level of descriptors: its children by key (key_value when
// they have a value), its wildcard children in configuration order, and
// its rule.
type level struct {
	children  map[string]*level
	wildcards []wildcard
	limits    []*RateLimit // rate_limit, then the extension's rate_limits
	share     bool         // share_threshold
	pattern   string       // the wildcard key, when share
}

type wildcard struct {
	key   string
	parts []string // key split on '*'
}

// File is one configuration file's name and content.
type File struct {
	Name string
	Data []byte
}

// ConfigError is a configuration that does not load: upstream's message,
// prefixed with the file (and the line, when known).
type ConfigError struct {
	File string
	Line int // 0 when not known
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// validKeys are the keys envoyproxy/ratelimit accepts, at any depth.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true, "unit": true,
	"requests_per_unit": true, "unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true, "share_threshold": true, "metadata": true,
	// ratesync's extensions, which upstream refuses.
	"rate_limits": true, "algorithm": true, "burst": true,
}

// extensionKeys are the keys ratesync reads beyond upstream's, and where.
var extensionKeys = map[string]string{"rate_limits": "descriptor", "algorithm": "rate_limit", "burst": "rate_limit"}

// LoadPath loads a file, or every .yaml and .yml file of a directory (in
// name order), as one configuration.
func LoadPath(path string) (*Config, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	names := []string{path}
	if st.IsDir() {
		names = nil
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
				names = append(names, filepath.Join(path, e.Name()))
			}
		}
		slices.Sort(names)
	}
	files := make([]File, 0, len(names))
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Name: n, Data: data})
	}
	return Load(files)
}

// Load loads files as one configuration: each file holds one domain, and
// a domain may not appear twice.
func Load(files []File) (*Config, error) {
	c := &Config{domains: map[string]*level{}}
	for _, f := range files {
		if err := c.load(f); err != nil {
			return nil, err
		}
	}
	return c, nil
}

type yamlRoot struct {
	Domain      string
	Descriptors []yamlDescriptor
}

type yamlDescriptor struct {
	Key            string
	Value          string
	RateLimit      *yamlRateLimit  `yaml:"rate_limit"`
	RateLimits     []yamlRateLimit `yaml:"rate_limits"`
	Descriptors    []yamlDescriptor
	QuotaMode      bool `yaml:"quota_mode"`
	ShadowMode     bool `yaml:"shadow_mode"`
	DetailedMetric bool `yaml:"detailed_metric"`
	ShareThreshold bool `yaml:"share_threshold"`
	line           int
}

type yamlRateLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string
	Unlimited       bool
	Name            string
	Replaces        []struct{ Name string }
	Algorithm       string
	Burst           *float64
	line            int
}

func (c *Config) load(f File) error {
	bad := func(line int, msg string) error { return &ConfigError{File: f.Name, Line: line, Msg: msg} }
	var doc yaml.Node
	if err := yaml.Unmarshal(f.Data, &doc); err != nil {
		return bad(0, "error loading config file: "+err.Error())
	}
	if len(doc.Content) == 0 {
		return bad(0, "config file cannot have empty domain")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return bad(root.Line, "error loading config file: the file must hold a mapping")
	}
	if err := validateKeys(root, "", bad); err != nil {
		return err
	}
	var y yamlRoot
	if err := root.Decode(&y); err != nil {
		return bad(0, "error loading config file: "+err.Error())
	}
	lines(root, y.Descriptors)
	if y.Domain == "" {
		return bad(root.Line, "config file cannot have empty domain")
	}
	if _, ok := c.domains[y.Domain]; ok {
		return bad(root.Line, fmt.Sprintf("duplicate domain '%s' in config file", y.Domain))
	}
	d := &level{children: map[string]*level{}}
	if err := d.load(f.Name, y.Domain+".", y.Descriptors, bad); err != nil {
		return err
	}
	c.domains[y.Domain] = d
	return nil
}

// lines sets each descriptor's line, and its rules', from the nodes they
// were decoded from.
func lines(n *yaml.Node, ds []yamlDescriptor) {
	list := child(n, "descriptors")
	if list == nil || list.Kind != yaml.SequenceNode {
		return
	}
	for i := range ds {
		if i >= len(list.Content) {
			break
		}
		d := list.Content[i]
		ds[i].line = d.Line
		if r := child(d, "rate_limit"); r != nil && ds[i].RateLimit != nil {
			ds[i].RateLimit.line = r.Line
		}
		if rs := child(d, "rate_limits"); rs != nil {
			for j := range ds[i].RateLimits {
				if j < len(rs.Content) {
					ds[i].RateLimits[j].line = rs.Content[j].Line
				}
			}
		}
		lines(d, ds[i].Descriptors)
	}
}

func child(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// validateKeys refuses the keys envoyproxy/ratelimit refuses, and lists of
// anything but mappings, as it does; ratesync's extension keys only where
// they belong. in is what n is: "descriptor" or "rate_limit" ("" for
// anything else).
func validateKeys(n *yaml.Node, in string, bad func(int, string) error) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return bad(k.Line, fmt.Sprintf("config error, key is not of type string: %v", k.Value))
		}
		if !validKeys[k.Value] {
			return bad(k.Line, fmt.Sprintf("config error, unknown key '%s'", k.Value))
		}
		if where, ext := extensionKeys[k.Value]; ext && where != in {
			return bad(k.Line, fmt.Sprintf("config error, key '%s' belongs in a %s (a ratesync extension)", k.Value, where))
		}
		if k.Value == "metadata" {
			continue
		}
		inner := ""
		switch k.Value {
		case "descriptors":
			inner = "descriptor"
		case "rate_limit", "rate_limits":
			inner = "rate_limit"
		}
		switch v.Kind {
		case yaml.SequenceNode:
			for _, e := range v.Content {
				if e.Kind != yaml.MappingNode {
					return bad(e.Line, fmt.Sprintf("config error, yaml file contains list of type other than map: %v", e.Value))
				}
				if err := validateKeys(e, inner, bad); err != nil {
					return err
				}
			}
		case yaml.MappingNode:
			if k.Value == "rate_limits" {
				return bad(v.Line, "config error, rate_limits must be a list of rate_limit mappings (a ratesync extension)")
			}
			if err := validateKeys(v, inner, bad); err != nil {
				return err
			}
		case yaml.ScalarNode:
			switch v.Tag {
			case "!!str", "!!int", "!!bool", "!!null":
			case "!!float":
				if k.Value != "burst" { // upstream takes no fraction; a burst may have one
					return bad(v.Line, "error checking config")
				}
			default:
				return bad(v.Line, "error checking config")
			}
		}
	}
	return nil
}

// load loads descriptors under l, parent being their parents' full key.
func (l *level) load(file, parent string, ds []yamlDescriptor, bad func(int, string) error) error {
	for _, d := range ds {
		if d.Key == "" {
			return bad(d.line, "descriptor has empty key")
		}
		key := d.Key
		if d.Value != "" {
			key += "_" + d.Value
		}
		full := parent + key
		if _, ok := l.children[key]; ok {
			return bad(d.line, fmt.Sprintf("duplicate descriptor composite key '%s'", full))
		}
		next := &level{children: map[string]*level{}}
		rules := d.RateLimits
		if d.RateLimit != nil {
			if d.RateLimit.line == 0 {
				d.RateLimit.line = d.line
			}
			rules = append([]yamlRateLimit{*d.RateLimit}, rules...)
		}
		for _, r := range rules {
			rl, err := r.rule(file, full, d, bad)
			if err != nil {
				return err
			}
			if rl.Unlimited && len(rules) > 1 {
				return bad(r.line, "an unlimited rate_limit cannot be combined with rate_limits (a ratesync extension)")
			}
			for _, prev := range next.limits {
				if rl.Algorithm == Upstream && prev.Algorithm == Upstream && prev.Unit == rl.Unit {
					return bad(r.line, fmt.Sprintf("two rate limits of '%s' count in the same %s window; give one an algorithm, or another unit", full, strings.ToLower(rl.Unit.String())))
				}
			}
			next.limits = append(next.limits, rl)
		}
		if d.ShareThreshold {
			if !strings.Contains(key, "*") {
				return bad(d.line, fmt.Sprintf("share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", key))
			}
			next.share, next.pattern = true, key
		}
		if strings.Contains(key, "*") {
			l.wildcards = append(l.wildcards, wildcard{key: key, parts: strings.Split(key, "*")})
		}
		if err := next.load(file, full+".", d.Descriptors, bad); err != nil {
			return err
		}
		l.children[key] = next
	}
	return nil
}

// rule returns the RateLimit of r, a rule of descriptor d at full.
func (r *yamlRateLimit) rule(file, full string, d yamlDescriptor, bad func(int, string) error) (*RateLimit, error) {
	unit, valid := unitNames[strings.ToUpper(r.Unit)]
	switch {
	case r.Unlimited && valid:
		return nil, bad(r.line, "should not specify rate limit unit when unlimited")
	case !r.Unlimited && !valid:
		return nil, bad(r.line, fmt.Sprintf("invalid rate limit unit '%s'", r.Unit))
	}
	rl := &RateLimit{
		RequestsPerUnit: r.RequestsPerUnit, Unit: unit, Unlimited: r.Unlimited, Name: r.Name,
		ShadowMode: d.ShadowMode, DetailedMetric: d.DetailedMetric, QuotaMode: d.QuotaMode, FullKey: full,
		Algorithm: Algorithm(r.Algorithm), Source: fmt.Sprintf("%s:%d", file, r.line),
	}
	for _, rep := range r.Replaces {
		switch {
		case rep.Name == "":
			return nil, bad(r.line, "should not have an empty replaces entry")
		case rep.Name == r.Name:
			return nil, bad(r.line, "replaces should not contain name of same descriptor")
		}
		rl.Replaces = append(rl.Replaces, rep.Name)
	}
	ext := func(msg string) error { return bad(r.line, msg+" (a ratesync extension)") }
	if rl.Algorithm != Upstream && !slices.Contains(algorithms, rl.Algorithm) {
		return nil, ext(fmt.Sprintf("algorithm '%s': must be one of %s", r.Algorithm, algorithmList()))
	}
	if rl.Unlimited && (rl.Algorithm != Upstream || r.Burst != nil) {
		return nil, ext("an unlimited rate_limit takes no algorithm or burst")
	}
	if rl.Algorithm != Upstream && rl.RequestsPerUnit == 0 {
		return nil, ext(fmt.Sprintf("requests_per_unit 0: must be > 0 with algorithm %s", rl.Algorithm))
	}
	if b := r.Burst; b != nil {
		switch {
		case !rl.Algorithm.Bucket():
			return nil, ext(fmt.Sprintf("burst: only with algorithm %s or %s, not %s", TokenBucket, LeakyBucket, cmp.Or(string(rl.Algorithm), "upstream's fixed window")))
		case !(*b > 0) || *b > 1e15:
			return nil, ext(fmt.Sprintf("burst %v: must be a number > 0 and at most 1e15", *b))
		}
		rl.Burst = *b
	}
	return rl, nil
}

func algorithmList() string {
	names := make([]string, len(algorithms))
	for i, a := range algorithms {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

// ErrUnknownDomain is Limit's answer for a domain the configuration does
// not hold.
var ErrUnknownDomain = errors.New("rls: unknown domain")

// Match is the rule that applies to a descriptor, and the values its
// counter is keyed by.
type Match struct {
	Limit *RateLimit // the first of Limits; nil when no rule applies
	// Limits are the descriptor's rate_limit followed by the extension's
	// rate_limits.
	Limits []*RateLimit
	// Shared holds, per entry, the wildcard value ("files*") that stands
	// for the entry's value in the counter's key when the entry matched a
	// share_threshold wildcard; "" for the others. Nil when none did.
	Shared []string
}

// Limit returns the rule that applies to the descriptor entries in domain:
// at each level the exact key_value first, then the wildcard values in
// configuration order (the first that matches), then the key alone; a rule
// applies only when the descriptor ends at its level. Limit is nil when no
// rule applies; the error is ErrUnknownDomain for a domain the
// configuration does not hold.
func (c *Config) Limit(domain string, entries []Entry) (Match, error) {
	d := c.domains[domain]
	if d == nil {
		return Match{}, ErrUnknownDomain
	}
	var m Match
	prev, children := d, d.children
	for i, e := range entries {
		key := e.Key + "_" + e.Value
		next, wild := children[key], ""
		if next == nil {
			for _, w := range prev.wildcards {
				if wildcardMatch(w.parts, key) {
					next, wild = children[w.key], w.key
					break
				}
			}
		}
		if next == nil {
			next = children[e.Key]
		}
		if wild != "" && next != nil && next.share {
			if m.Shared == nil {
				m.Shared = make([]string, len(entries))
			}
			m.Shared[i] = strings.TrimPrefix(next.pattern, e.Key+"_")
		}
		if next != nil && len(next.limits) > 0 && i == len(entries)-1 {
			m.Limit, m.Limits = next.limits[0], next.limits
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		prev, children = next, next.children
	}
	if m.Limit == nil {
		m.Shared = nil
	}
	return m, nil
}

// Domains returns the configuration's domains, sorted.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// wildcardMatch reports whether value matches a pattern split on '*': each
// '*' matches any run of characters, the empty one included.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	fixed := 0
	for _, p := range parts {
		fixed += len(p)
	}
	if len(value) < fixed {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
