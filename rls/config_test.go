package rls_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratesync/ratesync/rls"
)

// A configuration in upstream's format: nested descriptors, a key-only
// default, wildcard values (a trailing one and one in the middle), a
// shared wildcard, an unlimited rule, a shadow rule and a replacing one.
const shop = `
domain: shop
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: method
        value: GET
        rate_limit: {unit: second, requests_per_unit: 10, name: tenant-get}
      - key: method
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: tenant
    value: acme
    rate_limit:
      unit: hour
      requests_per_unit: 1000
      name: acme
      replaces:
        - name: tenant-get
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: path
    value: /api/v1/*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /files/*/raw
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 7}
  - key: internal
    rate_limit: {unlimited: true}
  - key: beta
    shadow_mode: true
    detailed_metric: true
    rate_limit: {unit: week, requests_per_unit: 3}
`

func load(t *testing.T, files ...rls.File) *rls.Config {
	t.Helper()
	c, err := rls.Load(files)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

func TestMatchingFollowsUpstreamOrder(t *testing.T) {
	c := load(t, rls.File{Name: "shop.yaml", Data: []byte(shop)})
	e := func(kv ...string) []rls.Entry {
		var out []rls.Entry
		for i := 0; i < len(kv); i += 2 {
			out = append(out, rls.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		entries []rls.Entry
		full    string // "" when no rule applies
	}{
		{"key-only default", e("tenant", "bob"), "shop.tenant"},
		{"exact value before the default", e("tenant", "acme"), "shop.tenant_acme"},
		{"nested exact", e("tenant", "bob", "method", "GET"), "shop.tenant.method_GET"},
		{"nested default", e("tenant", "bob", "method", "POST"), "shop.tenant.method"},
		{"a descriptor longer than the configuration gets nothing", e("tenant", "bob", "method", "GET", "path", "/"), ""},
		{"a descriptor ending above a rule's level gets the level's own rule", e("tenant", "x"), "shop.tenant"},
		{"a level without children ends the walk", e("tenant", "acme", "method", "GET"), ""},
		{"wildcards in configuration order: the first that matches wins", e("path", "/api/v1/users"), "shop.path_/api/*"},
		{"a wildcard in the middle", e("path", "/files/a/b/raw"), "shop.path_/files/*/raw"},
		{"a wildcard that does not match", e("path", "/files/a/b/cooked"), ""},
		{"unlimited", e("internal", "x"), "shop.internal"},
		{"unknown key", e("nope", "x"), ""},
	} {
		m, err := c.Limit("shop", tc.entries)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := ""
		if m.Limit != nil {
			got = m.Limit.FullKey
		}
		if got != tc.full {
			t.Errorf("%s: rule %q, want %q", tc.name, got, tc.full)
		}
	}
	m, _ := c.Limit("shop", e("path", "/files/x/raw"))
	if len(m.Shared) != 1 || m.Shared[0] != "/files/*/raw" {
		t.Errorf("a share_threshold wildcard: shared %q, want the pattern for the entry", m.Shared)
	}
	m, _ = c.Limit("shop", e("tenant", "acme"))
	if r := m.Limit; r.Name != "acme" || r.Unit != rls.Hour || r.RequestsPerUnit != 1000 || len(r.Replaces) != 1 || r.Replaces[0] != "tenant-get" {
		t.Errorf("tenant acme: %+v", r)
	}
	m, _ = c.Limit("shop", e("beta", "1"))
	if r := m.Limit; !r.ShadowMode || !r.DetailedMetric || r.Unit.Duration() != 7*24*60*60*1e9 {
		t.Errorf("beta: %+v", r)
	}
	m, _ = c.Limit("shop", e("internal", "x"))
	if !m.Limit.Unlimited {
		t.Errorf("internal: %+v, want unlimited", m.Limit)
	}
	if _, err := c.Limit("other", e("tenant", "bob")); !errors.Is(err, rls.ErrUnknownDomain) {
		t.Errorf("an unknown domain: %v", err)
	}
}

func TestInvalidConfigurationsAreRefusedAsUpstreamRefusesThem(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"empty domain", "descriptors: []\n", "x.yaml:1: config file cannot have empty domain"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", "x.yaml:3: descriptor has empty key"},
		{"duplicate composite key", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        value: c\n      - key: b\n        value: c\n", "x.yaml:7: duplicate descriptor composite key 'd.a.b_c'"},
		{"invalid unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", "x.yaml:4: invalid rate limit unit 'fortnight'"},
		{"unlimited with a unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n", "x.yaml:4: should not specify rate limit unit when unlimited"},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: \"\"}]}\n", "x.yaml:4: should not have an empty replaces entry"},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n", "x.yaml:4: replaces should not contain name of same descriptor"},
		{"share_threshold without a wildcard", "domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n", "x.yaml:3: share_threshold can only be used with wildcard values (containing '*'), but found key 'a_b'"},
		{"unknown key", "domain: d\ndescriptors:\n  - key: a\n    ratelimit: {unit: second}\n", "x.yaml:4: config error, unknown key 'ratelimit'"},
		{"a list of scalars", "domain: d\ndescriptors:\n  - a\n", "x.yaml:3: config error, yaml file contains list of type other than map: a"},
		{"a fraction", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n", `x.yaml:4: requests_per_unit: "1.5": must be a whole number from 0 to 4294967295`},
		{"not a number", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: abc\n", `x.yaml:6: requests_per_unit: "abc": must be a whole number from 0 to 4294967295`},
		{"too large", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n", `x.yaml:4: requests_per_unit: "4294967296": must be a whole number from 0 to 4294967295`},
		{"negative", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", `x.yaml:4: requests_per_unit: "-1": must be a whole number from 0 to 4294967295`},
		{"not a boolean", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n", `x.yaml:4: shadow_mode: "maybe": must be true or false`},
		{"a value with a fraction", "domain: d\ndescriptors:\n  - key: a\n    value: 1.5\n", `x.yaml:4: value: "1.5": must be a string: write it in quotes`},
		{"a key as a list", "domain: d\ndescriptors:\n  - key: [a]\n", `x.yaml:3: key: must be a string, not a list`},
		{"a burst that is not a number", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: lots}\n", `x.yaml:4: burst: "lots": must be a number`},
		{"not yaml", "domain: [\n", "x.yaml: error loading config file: yaml: line 1: did not find expected node content"},
	} {
		_, err := rls.Load([]rls.File{{Name: "x.yaml", Data: []byte(tc.yaml)}})
		var ce *rls.ConfigError
		if !errors.As(err, &ce) || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	_, err := rls.Load([]rls.File{{Name: "a.yaml", Data: []byte("domain: d\n")}, {Name: "b.yaml", Data: []byte("domain: d\n")}})
	if err == nil || err.Error() != "b.yaml:1: duplicate domain 'd' in config file" {
		t.Errorf("a domain in two files: %v", err)
	}
}

// One load reports every error of a file, each at its line; a rule whose
// value has the wrong type gets that error alone.
func TestEveryErrorOfAFileAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"types and rules", `domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1.5}
  - key: b
    rate_limit: {unit: fortnight, requests_per_unit: 1}
  - value: v
  - key: c
    shadow_mode: maybe
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 0}
  - key: d
    ratelimit: {unit: second}
  - key: e
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: quick}
`, []string{
			`x.yaml:4: requests_per_unit: "1.5": must be a whole number from 0 to 4294967295`,
			`x.yaml:9: shadow_mode: "maybe": must be true or false`,
			`x.yaml:12: config error, unknown key 'ratelimit'`,
			`x.yaml:6: invalid rate limit unit 'fortnight'`,
			`x.yaml:7: descriptor has empty key`,
			`x.yaml:10: burst 0: must be a number > 0 and at most 1e15 (a ratesync extension)`,
			`x.yaml:14: algorithm 'quick': must be one of sliding, fixed, anchored, sliding_log, token_bucket, leaky_bucket (a ratesync extension)`,
		}},
		{"nested", `domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: x}
      - key: b
      - key: b
`, []string{
			`x.yaml:6: requests_per_unit: "x": must be a whole number from 0 to 4294967295`,
			`x.yaml:7: duplicate descriptor composite key 'd.a.b'`,
			`x.yaml:8: duplicate descriptor composite key 'd.a.b'`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rls.Load([]rls.File{{Name: "x.yaml", Data: []byte(tc.yaml)}})
			if err == nil {
				t.Fatal("loaded")
			}
			if got, want := err.Error(), strings.Join(tc.want, "\n"); got != want {
				t.Errorf("errors:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestLoadPathReadsADirectory(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"a.yaml": "domain: a\n", "b.yml": "domain: b\n", "notes.txt": "domain: c\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := rls.LoadPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Domains(), ","); got != "a,b" {
		t.Fatalf("domains %q, want a,b (YAML files only)", got)
	}
	if _, err := rls.LoadPath(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Fatal("a missing file loaded")
	}
}

// A boolean key takes the forms the YAML decoder (and upstream's) reads as
// true or false: true, yes, on, and their opposites.
func TestBooleanForms(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  bool
	}{{"true", true}, {"yes", true}, {"on", true}, {"false", false}, {"no", false}, {"off", false}} {
		t.Run(tt.value, func(t *testing.T) {
			c, err := rls.Load([]rls.File{{Name: "x.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: a\n    shadow_mode: " + tt.value + "\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}})
			if err != nil {
				t.Fatalf("shadow_mode: %s: %v", tt.value, err)
			}
			m, err := c.Limit("d", []rls.Entry{{Key: "a"}})
			if err != nil || m.Limit == nil || m.Limit.ShadowMode != tt.want {
				t.Fatalf("shadow_mode: %s: rule %+v, %v; want shadow mode %v", tt.value, m.Limit, err, tt.want)
			}
		})
	}
}
