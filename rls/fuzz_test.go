package rls_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ratesync/ratesync/rls"
)

// FuzzLoadRLSConfig feeds the rls file loader arbitrary files. It must
// never panic; every error it reports is a *ConfigError naming the file;
// a file it takes has rules that can be listed and matched.
// Seeds: the example files and the configurations of the tests.
//
//	go test -run=^$ -fuzz=FuzzLoadRLSConfig -fuzztime=60s ./rls
func FuzzLoadRLSConfig(f *testing.F) {
	files, _ := filepath.Glob("../examples/rls/*.yaml")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, seed := range []string{
		shop,
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n  - key: b\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      - {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 10}\n      - {unit: minute, requests_per_unit: 100, algorithm: sliding}\n",
		"domain: d\ndescriptors:\n  - key: a\n    value: x*y\n    share_threshold: true\n    descriptors:\n      - key: b\n        rate_limit: {unlimited: true}\n",
		"domain: d\ndescriptors: &d [{key: a, descriptors: *d}]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := rls.Load([]rls.File{{Name: "fuzz.yaml", Data: data}})
		if err != nil {
			for _, e := range unwrapAll(err) {
				var ce *rls.ConfigError
				if !errors.As(e, &ce) || ce.File != "fuzz.yaml" {
					t.Fatalf("an error that is not a ConfigError of the file: %v", e)
				}
			}
			return
		}
		list, limits := c.Limits()
		if len(list) != len(limits) {
			t.Fatalf("Limits: %d rules, %d limits", len(list), len(limits))
		}
		for _, d := range c.Domains() {
			_, _ = c.Limit(d, []rls.Entry{{Key: "a", Value: "x"}})
		}
	})
}

// unwrapAll returns the errors err joins, or err.
func unwrapAll(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
