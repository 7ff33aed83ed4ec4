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
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
// a domain may not appear twice. A configuration that does not load gets
// every error found, each a *ConfigError, joined (errors.Join).
func Load(files []File) (*Config, error) {
	c := &Config{domains: map[string]*level{}}
	var errs []error
	for _, f := range files {
		errs = append(errs, c.load(f)...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
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

// maxErrors bounds the errors reported of one file.
const maxErrors = 100

// fileLoad is one file being loaded: its errors, and the lines of the
// mappings (descriptors, rate limits) with a value of the wrong type, whose
// other errors would follow from it and are not reported.
type fileLoad struct {
	name     string
	errs     []error
	badLines map[int]bool
}

// bad records an error at line (0: not known).
func (l *fileLoad) bad(line int, msg string) {
	if len(l.errs) < maxErrors {
		l.errs = append(l.errs, &ConfigError{File: l.name, Line: line, Msg: msg})
	} else if len(l.errs) == maxErrors {
		l.errs = append(l.errs, &ConfigError{File: l.name, Msg: fmt.Sprintf("more than %d errors; stopped", maxErrors)})
	}
}

// badAt records an error about the mapping at line, unless one of its
// values has the wrong type.
func (l *fileLoad) badAt(line int, msg string) {
	if !l.badLines[line] {
		l.bad(line, msg)
	}
}

// load loads file f into c, and returns its errors: its YAML, then its
// keys and the types of their values, then its descriptors and rules.
func (c *Config) load(f File) []error {
	l := &fileLoad{name: f.Name, badLines: map[int]bool{}}
	root, ok := l.parse(f.Data)
	if !ok {
		return l.errs
	}
	l.checkKeys(root, "")
	y, ok := l.decode(root)
	if !ok {
		return l.errs
	}
	if y.Domain == "" {
		l.bad(root.Line, "config file cannot have empty domain")
		return l.errs
	}
	if _, dup := c.domains[y.Domain]; dup {
		l.bad(root.Line, fmt.Sprintf("duplicate domain '%s' in config file", y.Domain))
		return l.errs
	}
	d := &level{children: map[string]*level{}}
	d.load(l, y.Domain+".", y.Descriptors)
	if len(l.errs) == 0 {
		c.domains[y.Domain] = d
	}
	return l.errs
}

// parse parses data as YAML and returns its top-level mapping.
func (l *fileLoad) parse(data []byte) (*yaml.Node, bool) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		l.bad(0, "error loading config file: "+err.Error())
		return nil, false
	}
	if len(doc.Content) == 0 {
		l.bad(0, "config file cannot have empty domain")
		return nil, false
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		l.bad(root.Line, "error loading config file: the file must hold a mapping")
		return nil, false
	}
	return root, true
}

// decode decodes root, whose keys and values checkKeys has checked. A
// value of the wrong type checkKeys reported is left at zero; the decoder
// reports only what checkKeys did not.
func (l *fileLoad) decode(root *yaml.Node) (yamlRoot, bool) {
	var y yamlRoot
	err := root.Decode(&y)
	var te *yaml.TypeError
	switch {
	case err == nil:
	case errors.As(err, &te) && len(l.errs) > 0:
	default:
		l.bad(0, "error loading config file: "+err.Error())
		return y, false
	}
	lines(root, y.Descriptors)
	return y, true
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

// checkKeys reports the keys envoyproxy/ratelimit refuses, lists of
// anything but mappings, as it does, and values of the wrong type, naming
// the key and the value; ratesync's extension keys only where they belong.
// in is what n is: "descriptor" or "rate_limit" ("" for anything else).
func (l *fileLoad) checkKeys(n *yaml.Node, in string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !l.checkKey(k, in) || k.Value == "metadata" {
			continue
		}
		var typeOK bool
		switch v.Kind {
		case yaml.SequenceNode:
			typeOK = l.checkList(k, v)
		case yaml.MappingNode:
			typeOK = l.checkMapping(k, v)
		case yaml.ScalarNode:
			typeOK = l.checkScalar(k, v)
		}
		if !typeOK {
			l.badLines[n.Line] = true
		}
	}
}

// checkKey reports whether k is a key that may be in a mapping of in.
func (l *fileLoad) checkKey(k *yaml.Node, in string) bool {
	if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
		l.bad(k.Line, fmt.Sprintf("config error, key is not of type string: %v", k.Value))
		return false
	}
	if !validKeys[k.Value] {
		l.bad(k.Line, fmt.Sprintf("config error, unknown key '%s'", k.Value))
		return false
	}
	if where, ext := extensionKeys[k.Value]; ext && where != in {
		l.bad(k.Line, fmt.Sprintf("config error, key '%s' belongs in a %s (a ratesync extension)", k.Value, where))
		return false
	}
	return true
}

// inner is what the mappings under key k are: "descriptor", "rate_limit"
// or "".
func inner(k string) string {
	switch k {
	case "descriptors":
		return "descriptor"
	case "rate_limit", "rate_limits":
		return "rate_limit"
	}
	return ""
}

// checkList checks the list v of key k: mappings only. It returns false
// when k takes no list.
func (l *fileLoad) checkList(k, v *yaml.Node) bool {
	if _, scalar := scalarKinds[k.Value]; scalar || k.Value == "rate_limit" {
		l.bad(v.Line, k.Value+": must be "+cmp.Or(scalarKinds[k.Value], "a mapping")+", not a list")
		return false
	}
	for _, e := range v.Content {
		if e.Kind != yaml.MappingNode {
			l.bad(e.Line, fmt.Sprintf("config error, yaml file contains list of type other than map: %v", e.Value))
			continue
		}
		l.checkKeys(e, inner(k.Value))
	}
	return true
}

// checkMapping checks the mapping v of key k. It returns false when k
// takes no mapping.
func (l *fileLoad) checkMapping(k, v *yaml.Node) bool {
	switch _, scalar := scalarKinds[k.Value]; {
	case scalar:
		l.bad(v.Line, k.Value+": must be "+scalarKinds[k.Value]+", not a mapping")
	case k.Value == "rate_limits":
		l.bad(v.Line, "config error, rate_limits must be a list of rate_limit mappings (a ratesync extension)")
	case k.Value == "descriptors" || k.Value == "replaces":
		l.bad(v.Line, k.Value+": must be a list of mappings")
	default:
		l.checkKeys(v, inner(k.Value))
		return true
	}
	return false
}

// checkScalar checks the single value v of key k.
func (l *fileLoad) checkScalar(k, v *yaml.Node) bool {
	if msg := scalarError(k.Value, v); msg != "" {
		l.bad(v.Line, fmt.Sprintf("%s: %s: %s", k.Value, strconv.Quote(v.Value), msg))
		return false
	}
	return true
}

// scalarKinds says what the value of each key with a single value must
// be.
var scalarKinds = map[string]string{
	"domain": "a string", "key": "a string", "value": "a string", "unit": "a string", "name": "a string", "algorithm": "a string",
	"requests_per_unit": "a whole number from 0 to 4294967295",
	"unlimited":         "true or false", "shadow_mode": "true or false", "quota_mode": "true or false",
	"detailed_metric": "true or false", "value_to_metric": "true or false", "share_threshold": "true or false",
	"burst": "a number",
}

// scalarError returns what is wrong with v as the value of key, or "".
// Upstream takes a number or a boolean where a string belongs (value: 200),
// a number without a fraction where a number belongs; ratesync's burst may
// have one. A null is an absent value.
func scalarError(key string, v *yaml.Node) string {
	want, ok := scalarKinds[key]
	switch {
	case !ok || v.Tag == "!!null" || scalarFits(want, v):
		return ""
	case want == "a string" && v.Tag == "!!float":
		return "must be a string: write it in quotes"
	}
	return "must be " + want
}

// scalarFits reports whether v is a value of the kind want names.
func scalarFits(want string, v *yaml.Node) bool {
	switch want {
	case "a string":
		return v.Tag == "!!str" || v.Tag == "!!int" || v.Tag == "!!bool"
	case "true or false": // yes, no, on, off... too, as the YAML decoder takes them
		var b bool
		return v.Decode(&b) == nil
	case "a number":
		var f float64
		return (v.Tag == "!!int" || v.Tag == "!!float") && v.Decode(&f) == nil && !math.IsNaN(f) && !math.IsInf(f, 0)
	}
	var n uint32 // requests_per_unit
	return v.Tag == "!!int" && v.Decode(&n) == nil
}

// load loads descriptors under lv, parent being their parents' full key.
func (lv *level) load(l *fileLoad, parent string, ds []yamlDescriptor) {
	for _, d := range ds {
		key, ok := d.compositeKey(l)
		if !ok {
			continue
		}
		full := parent + key
		if _, dup := lv.children[key]; dup {
			l.badAt(d.line, fmt.Sprintf("duplicate descriptor composite key '%s'", full))
			continue
		}
		next := &level{children: map[string]*level{}}
		next.loadRules(l, full, d)
		next.loadShare(l, key, d)
		if strings.Contains(key, "*") {
			lv.wildcards = append(lv.wildcards, wildcard{key: key, parts: strings.Split(key, "*")})
		}
		next.load(l, full+".", d.Descriptors)
		lv.children[key] = next
	}
}

// compositeKey returns d's key at its level: key, or key_value.
func (d yamlDescriptor) compositeKey(l *fileLoad) (string, bool) {
	if d.Key == "" {
		l.badAt(d.line, "descriptor has empty key")
		return "", false
	}
	if d.Value != "" {
		return d.Key + "_" + d.Value, true
	}
	return d.Key, true
}

// loadRules loads the rules of descriptor d at full: rate_limit, then the
// extension's rate_limits.
func (lv *level) loadRules(l *fileLoad, full string, d yamlDescriptor) {
	rules := d.RateLimits
	if d.RateLimit != nil {
		if d.RateLimit.line == 0 {
			d.RateLimit.line = d.line
		}
		rules = append([]yamlRateLimit{*d.RateLimit}, rules...)
	}
	for _, r := range rules {
		rl, ok := r.rule(l, full, d)
		if !ok {
			continue
		}
		if rl.Unlimited && len(rules) > 1 {
			l.badAt(r.line, "an unlimited rate_limit cannot be combined with rate_limits (a ratesync extension)")
			continue
		}
		if lv.sameWindow(rl) {
			l.badAt(r.line, fmt.Sprintf("two rate limits of '%s' count in the same %s window; give one an algorithm, or another unit", full, strings.ToLower(rl.Unit.String())))
			continue
		}
		lv.limits = append(lv.limits, rl)
	}
}

// sameWindow reports whether lv has an upstream rule counting in the
// window of rl, an upstream rule.
func (lv *level) sameWindow(rl *RateLimit) bool {
	for _, prev := range lv.limits {
		if rl.Algorithm == Upstream && prev.Algorithm == Upstream && prev.Unit == rl.Unit {
			return true
		}
	}
	return false
}

// loadShare applies share_threshold, for wildcard keys only.
func (lv *level) loadShare(l *fileLoad, key string, d yamlDescriptor) {
	if !d.ShareThreshold {
		return
	}
	if !strings.Contains(key, "*") {
		l.badAt(d.line, fmt.Sprintf("share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", key))
		return
	}
	lv.share, lv.pattern = true, key
}

// rule returns the RateLimit of r, a rule of descriptor d at full; false
// when r is invalid (its errors reported): its unit, its replaces, then
// ratesync's extension keys.
func (r *yamlRateLimit) rule(l *fileLoad, full string, d yamlDescriptor) (*RateLimit, bool) {
	n := len(l.errs)
	rl := &RateLimit{
		RequestsPerUnit: r.RequestsPerUnit, Unit: r.unit(l), Unlimited: r.Unlimited, Name: r.Name,
		ShadowMode: d.ShadowMode, DetailedMetric: d.DetailedMetric, QuotaMode: d.QuotaMode, FullKey: full,
		Algorithm: Algorithm(r.Algorithm), Source: fmt.Sprintf("%s:%d", l.name, r.line),
		Replaces: r.replaces(l),
	}
	r.checkExtension(l, rl)
	if r.Burst != nil {
		rl.Burst = *r.Burst
	}
	return rl, len(l.errs) == n && !l.badLines[r.line]
}

// unit returns r's unit: none when unlimited, else one of the units.
func (r *yamlRateLimit) unit(l *fileLoad) Unit {
	unit, valid := unitNames[strings.ToUpper(r.Unit)]
	switch {
	case r.Unlimited && valid:
		l.badAt(r.line, "should not specify rate limit unit when unlimited")
	case !r.Unlimited && !valid:
		l.badAt(r.line, fmt.Sprintf("invalid rate limit unit '%s'", r.Unit))
	}
	return unit
}

// replaces returns the names of the rules r replaces: not empty, not its
// own.
func (r *yamlRateLimit) replaces(l *fileLoad) []string {
	var out []string
	for _, rep := range r.Replaces {
		switch {
		case rep.Name == "":
			l.badAt(r.line, "should not have an empty replaces entry")
		case rep.Name == r.Name:
			l.badAt(r.line, "replaces should not contain name of same descriptor")
		default:
			out = append(out, rep.Name)
		}
	}
	return out
}

// checkExtension checks ratesync's keys of r, whose rule is rl: an
// algorithm of the list, with requests_per_unit > 0, not on an unlimited
// rule; a burst for buckets only, in range.
func (r *yamlRateLimit) checkExtension(l *fileLoad, rl *RateLimit) {
	ext := func(msg string) { l.badAt(r.line, msg+" (a ratesync extension)") }
	switch {
	case rl.Algorithm != Upstream && !slices.Contains(algorithms, rl.Algorithm):
		ext(fmt.Sprintf("algorithm '%s': must be one of %s", r.Algorithm, algorithmList()))
	case rl.Unlimited && (rl.Algorithm != Upstream || r.Burst != nil):
		ext("an unlimited rate_limit takes no algorithm or burst")
	case rl.Algorithm != Upstream && rl.RequestsPerUnit == 0:
		ext(fmt.Sprintf("requests_per_unit 0: must be > 0 with algorithm %s", rl.Algorithm))
	}
	switch b := r.Burst; {
	case b == nil:
	case !rl.Algorithm.Bucket():
		ext(fmt.Sprintf("burst: only with algorithm %s or %s, not %s", TokenBucket, LeakyBucket, cmp.Or(string(rl.Algorithm), "upstream's fixed window")))
	case !(*b > 0) || *b > 1e15:
		ext(fmt.Sprintf("burst %v: must be a number > 0 and at most 1e15", *b))
	}
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
