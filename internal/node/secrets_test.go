package node

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/node/config"
)

func TestLogsMaskSecrets(t *testing.T) {
	cfg := testConfig(t, `
node:
  admin_token: t0ken-xyz
namespaces:
  - name: r
    strategy: redis
    url: redis://:pa55word@127.0.0.1:1/0
`, nil)
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			cfg.Node.LogFormat = format
			var buf bytes.Buffer
			log, _ := newLogger(cfg, &buf)
			log.Info("dial redis://:pa55word@127.0.0.1:1/0", "url", cfg.Namespaces[0].URL, "err", errors.New("auth pa55word refused"), "token", "t0ken-xyz")
			if out := buf.String(); strings.Contains(out, "pa55word") || strings.Contains(out, "t0ken-xyz") || !strings.Contains(out, "xxxxx") {
				t.Errorf("log leaks a secret: %s", out)
			}
		})
	}
	if err := redactErr(errors.New("final sync: pa55word"), cfg); strings.Contains(err.Error(), "pa55word") {
		t.Errorf("redactErr: %v", err)
	}
}

// A password in a URL of an unexpected shape never reaches an error or
// the log.
func TestMalformedURLsDoNotLeak(t *testing.T) {
	tests := []struct{ name, yaml, env string }{
		{"no scheme", "namespaces:\n  - {name: a, strategy: redis, url: \"//u:pw1LEAK@h:6379\"}\n", ""},
		{"one slash", "namespaces:\n  - {name: a, strategy: redis, url: \"redis:/u:pw1LEAK@h\"}\n", ""},
		{"user as scheme", "namespaces:\n  - {name: a, strategy: redis, url: \"u:pw1LEAK@h:6379\"}\n", ""},
		{"postgres one slash", "namespaces:\n  - {name: a, strategy: postgres, url: \"postgresql:/u:pw1LEAK@h/db\"}\n", ""},
		{"gateway upstream", "gateway: {upstream: \"//u:pw1LEAK@h:80\"}\n", ""},
		{"from the environment", "namespaces:\n  - {name: a, strategy: redis}\n", "//u:pw1LEAK@h:6379"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "node.yaml")
			if err := os.WriteFile(file, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			env := []string{config.EnvRedisURL + "=" + tt.env}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var logs bytes.Buffer
			err := runWithLog(ctx, []string{"-config", file, "-listen", "127.0.0.1:0"}, env, &logs)
			if err == nil {
				t.Fatalf("accepted; log:\n%s", &logs)
			}
			if out := err.Error() + logs.String(); strings.Contains(out, "pw1LEAK") {
				t.Errorf("the password leaks:\n%s", out)
			}
		})
	}
}
