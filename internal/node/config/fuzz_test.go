package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoadConfig feeds the config loader arbitrary files. It must never
// panic; a file it takes has a configuration that prints (secrets masked),
// and a file it refuses gets errors that each name the file.
// Seeds: the example files and the files of the config tests.
//
//	go test -run=^$ -fuzz=FuzzLoadConfig -fuzztime=60s ./internal/node/config
func FuzzLoadConfig(f *testing.F) {
	for _, pattern := range []string{"../../../examples/*.yaml", "../../../cmd/node/testdata/*.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, name := range files {
			data, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	for _, seed := range []string{
		"node:\n  colour: red\n  log_level: loud\n",
		"namespaces:\n  - name: a\n    strategy: redis\n    url: redis://:pw@127.0.0.1:1/0\n    window_sizes: [1s, 1m]\npolicies:\n  - name: p\n    namespace: a\n    limits: [{limit: 10, window: 1s, type: token_bucket, burst: 20}]\n",
		"gateway:\n  upstream: http://127.0.0.1:1\n  trusted_proxies: [10.0.0.0/8]\n  routes: [{path: /api/, methods: [GET], policy: p}]\npolicies:\n  - {name: p, key: [ip, header:X-User], limits: [{limit: 1, window: 1m}]}\n",
		"a: &a [*a, *a]\n",
		"namespaces: &n [{name: x}]\npolicies: *n\n",
		"node:\n  shutdown_timeout: 9999999999h\n",
	} {
		f.Add([]byte(seed))
	}
	env := envOf(map[string]string{EnvRedisURL: "redis://127.0.0.1:1/0", EnvPostgresURL: "postgres://u:pw@127.0.0.1:1/db"})
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data, env)
		if err != nil {
			for line := range strings.SplitSeq(err.Error(), "\n") {
				if !strings.HasPrefix(line, "fuzz.yaml") {
					t.Fatalf("an error without the file's name: %q\nin:\n%v", line, err)
				}
			}
			return
		}
		if _, err := json.Marshal(cfg.Masked()); err != nil {
			t.Fatalf("the effective configuration does not print: %v", err)
		}
	})
}
