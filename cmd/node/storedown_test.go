package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/arith"
	"github.com/ratesync/ratesync/internal/node/config"
	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/strategy/postgres"
)

// writeConfig writes a node configuration file and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// get returns the status and body of a GET.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// logLine is one line of a node's log, as either format writes it.
type logLine struct {
	level, msg, text string
	attrs            map[string]any // JSON lines only
}

// parseLog parses every line of a log in format ("json" or "text"),
// failing t for a line that is not one of that format.
func parseLog(t *testing.T, format, log string) []logLine {
	t.Helper()
	var out []logLine
	for i, text := range strings.Split(strings.TrimSuffix(log, "\n"), "\n") {
		l := logLine{text: text}
		switch format {
		case "json":
			if err := json.Unmarshal([]byte(text), &l.attrs); err != nil {
				t.Errorf("line %d is not JSON (%v): %s", i+1, err, text)
				continue
			}
			l.level, _ = l.attrs["level"].(string)
			l.msg, _ = l.attrs["msg"].(string)
		default:
			if !strings.HasPrefix(text, "time=") || !strings.Contains(text, " level=") || !strings.Contains(text, " msg=") {
				t.Errorf("line %d is not a text log line: %s", i+1, text)
				continue
			}
			level, _, _ := strings.Cut(text[strings.Index(text, " level=")+len(" level="):], " ")
			msg := text[strings.Index(text, " msg=")+len(" msg="):]
			if strings.HasPrefix(msg, `"`) {
				end := strings.Index(msg[1:], `"`)
				msg = msg[1 : end+1]
			} else {
				msg, _, _ = strings.Cut(msg, " ")
			}
			l.level, l.msg = level, msg
		}
		if l.level == "" || l.msg == "" {
			t.Errorf("line %d has no level or message: %s", i+1, text)
		}
		out = append(out, l)
	}
	return out
}

// With Redis and PostgreSQL out of reach, every line the node writes is of
// its log format, the store clients' own lines included, and its start
// logs one WARN per namespace whose store does not answer (the syncer's),
// and no "store ready" for it.
func TestLogFormatWithStoresDown(t *testing.T) {
	bin := buildNode(t)
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			cfg := writeConfig(t, fmt.Sprintf(`
node:
  log_format: %s
  shutdown_timeout: 5s
namespaces:
  - name: r
    strategy: redis
    url: redis://:s3cret@127.0.0.1:1/0
    sync_rate: 100ms
    window_sizes: [1m]
    redis: {timeout: 200ms}
  - name: p
    strategy: postgres
    url: postgres://user:s3cret@127.0.0.1:1/db
    sync_rate: 0
    window_sizes: [1m]
`, format))
			p := startNode(t, bin, nil, "-config", cfg, "-listen", "127.0.0.1:0")
			for _, ns := range []string{"r", "p"} {
				if code := post(t, p.url+"/v1/check", `{"namespace":"`+ns+`","key":"k","limits":[{"limit":10,"window":"1m"}]}`); code != 200 {
					t.Errorf("check in namespace %s: status %d", ns, code)
				}
			}
			if code, body := get(t, p.url+"/readyz"); code != 503 ||
				!strings.Contains(body, "store redis at redis://:xxxxx@127.0.0.1:1/0 unreachable") ||
				!strings.Contains(body, "store postgres at postgres://user:xxxxx@127.0.0.1:1/db unreachable") {
				t.Errorf("readyz: %d %s", code, body)
			}
			// The final sync cannot push the two hits: exit 1, logged.
			if code := p.stop(t, syscall.SIGTERM); code != 1 {
				t.Errorf("exit code %d, want 1: the final sync fails", code)
			}
			log := p.log()
			if strings.Contains(log, "s3cret") {
				t.Errorf("a password in the log:\n%s", log)
			}
			lines := parseLog(t, format, log)
			unreachable := map[string]int{}
			seen := map[string]bool{}
			for _, l := range lines {
				seen[l.msg] = true
				if l.msg == "listening" {
					break
				}
				if l.msg == "ratesync: store down: deciding on this node until it answers" {
					unreachable[l.level]++
				}
				if l.msg == "store ready" || strings.HasPrefix(l.msg, "first sync failed") {
					t.Errorf("at start: %s", l.text)
				}
			}
			if unreachable["WARN"] != 2 || len(unreachable) != 1 {
				t.Errorf("store down lines at start by level: %v, want one WARN per namespace", unreachable)
			}
			for _, msg := range []string{"redis client: connection pool: failed to dial after 5 attempts: dial tcp 127.0.0.1:1: connect: connection refused",
				"postgres client: connect failed"} {
				if !seen[msg] {
					t.Errorf("no line %q at start", msg)
				}
			}
			if last := lines[len(lines)-1]; last.level != "ERROR" || last.msg != "ratesync node stopped with an error" || !strings.Contains(last.text, "final sync") {
				t.Errorf("last line: %s, want the error the node exits with", last.text)
			}
			if format == "json" {
				for _, l := range lines {
					if strings.HasPrefix(l.msg, "postgres client:") && (l.attrs["err"] == nil || l.attrs["host"] != "127.0.0.1") {
						t.Errorf("pgx's line lacks its error or host: %s", l.text)
					}
				}
			}
		})
	}
}

// A node starts with its PostgreSQL down, as with Redis: it counts
// locally, /readyz names the store, and once the server is up the schema
// is created and the counts reach it. With require_stores a node starts
// only when every store answers, and otherwise exits 1 naming the store.
func TestPostgresDownAtStart(t *testing.T) {
	pg := testenv.PrivatePostgres(t)
	u, err := url.Parse(pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "s3cret") // trust auth: a password to mask
	dbURL := u.String()
	pg.Stop(t)
	bin := buildNode(t)
	env := []string{config.EnvPostgresURL + "=" + dbURL}
	const nsYAML = `
namespaces:
  - name: pg
    strategy: postgres
    sync_rate: 100ms
    window_sizes: [1h]
`
	node := startNode(t, bin, env, "-config", writeConfig(t, nsYAML), "-listen", "127.0.0.1:0")
	code, body := get(t, node.url+"/readyz")
	if want := "store postgres at " + config.MaskURL(dbURL) + " unreachable: "; code != 503 || !strings.Contains(body, want) {
		t.Fatalf("readyz with the server down: %d %s, want 503 with %q", code, body, want)
	}
	start := time.Now()
	const hits = 3
	for range hits {
		if code := post(t, node.url+"/v1/check", `{"namespace":"pg","key":"k","limits":[{"limit":100,"window":"1h"}]}`); code != 200 {
			t.Fatalf("check with the server down: status %d", code)
		}
	}
	end := time.Now()

	pg.Start(t)
	waitFor(t, time.Minute, "/readyz 200 once the server is up", func() bool {
		code, _ := get(t, node.url+"/readyz")
		return code == 200
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := postgres.New(ctx, pg.Pool(t), postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	count := func() float64 {
		total := 0.0
		for _, s := range windowStarts(start, end, time.Hour) {
			c, err := store.GetWindow(ctx, "pg", "k", s, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			total += c
		}
		return total
	}
	waitFor(t, time.Minute, "the hits counted meanwhile in the store", func() bool { return count() == hits })
	if code := node.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	if got := count(); got != hits {
		t.Errorf("store holds %v hits, want %d", got, hits)
	}
	if log := node.log(); !strings.Contains(log, `msg="postgres: schema migrated"`) || strings.Contains(log, "s3cret") {
		t.Errorf("log without the migration, or with the password:\n%s", log)
	}

	required := writeConfig(t, "require_stores: true\nnode: {log_format: json}\n"+nsYAML)
	t.Run("require_stores, server up", func(t *testing.T) {
		node := startNode(t, bin, env, "-config", required, "-listen", "127.0.0.1:0")
		if code := node.stop(t, syscall.SIGTERM); code != 0 {
			t.Errorf("exit code %d after SIGTERM", code)
		}
		if !strings.Contains(node.log(), `"msg":"store ready","namespace":"pg","strategy":"postgres","url":"`+config.MaskURL(dbURL)+`"`) {
			t.Errorf("no store ready line:\n%s", node.log())
		}
	})
	t.Run("require_stores, server down", func(t *testing.T) {
		pg.Stop(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "-config", required, "-listen", "127.0.0.1:0")
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("exit: %v, want code 1\n%s", err, out)
		}
		lines := parseLog(t, "json", string(out))
		last := lines[len(lines)-1]
		want := `require_stores: namespace "pg": strategy postgres at ` + config.MaskURL(dbURL) + `: the store does not answer: `
		if e, _ := last.attrs["err"].(string); last.msg != "ratesync node cannot start" || !strings.HasPrefix(e, want) {
			t.Errorf("last line %s, want an error starting %q", last.text, want)
		}
		for _, l := range lines {
			if l.msg == "listening" || l.msg == "store ready" {
				t.Errorf("a node that cannot start: %s", l.text)
			}
		}
		if strings.Contains(string(out), "s3cret") {
			t.Errorf("the password in the output:\n%s", out)
		}
	})
}

// windowStarts returns the starts of the windows of size that [from, to]
// touches.
func windowStarts(from, to time.Time, size time.Duration) []time.Time {
	var out []time.Time
	for s := arith.WindowStart(from, size); !s.After(to); s = s.Add(size) {
		out = append(out, s)
	}
	return out
}
