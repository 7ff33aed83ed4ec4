package config

import "testing"

// envOf returns a getenv over a map.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// testConfig parses yaml as the file "test.yaml".
func testConfig(t testing.TB, yaml string, env map[string]string) Config {
	t.Helper()
	var data []byte
	if yaml != "" {
		data = []byte(yaml)
	}
	cfg, err := Parse("test.yaml", data, envOf(env))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}
