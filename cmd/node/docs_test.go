package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratesync/ratesync/internal/testenv"
)

// TestDocsNodeCommands starts the node of every command line in the pages'
// nodes blocks (./ratesync-node or go run ./cmd/node; a go build line is
// this test binary, and a go test line one that .ci/run runs), one after
// the other, as the page shows it: its
// configuration file, its flags and its environment, with two changes: the
// store URLs the environment names are those of test servers, and each
// listener is on a free port. Before that it checks the addresses the page
// gives: no two listeners share one, and the gateway does not proxy to its
// own listener. Each node must answer /readyz with 200; a gateway whose
// upstream does not listen must answer 502, as docs/http-api.md says.
func TestDocsNodeCommands(t *testing.T) {
	var lines [][]string
	for _, page := range docPages(t) {
		for _, b := range pageBlocks(t, page) {
			if b.mark != readmeNodesMark {
				continue
			}
			cmds, err := shellCommands(b.commands, readmeEnv)
			if err != nil {
				t.Fatalf("%s:%d: %v", page, b.line, err)
			}
			for _, words := range cmds {
				switch line := strings.Join(words, " "); {
				case line == readmeBuild:
					continue // this test runs the node in process
				case strings.HasPrefix(line, "go test "):
					// CI runs the test command a page gives: .ci/run names it.
					ci, err := os.ReadFile("../../.ci/run")
					if err != nil || !strings.Contains(string(ci), "(README: "+line+")") {
						t.Errorf("%s:%d: .ci/run does not run %q (%v)", page, b.line, line, err)
					}
					continue
				case strings.HasPrefix(line, "go run ./cmd/node"):
					words = append([]string{"./ratesync-node"}, words[3:]...)
				}
				lines = append(lines, words)
			}
		}
	}
	if len(lines) == 0 {
		t.Fatalf("no %q block in README.md or docs/", readmeNodesMark)
	}
	for _, words := range lines {
		t.Run(strings.Join(words, " "), func(t *testing.T) { testDocsNodeCommand(t, words) })
	}
}

func testDocsNodeCommand(t *testing.T, words []string) {
	var env []string
	for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
		name, _, _ := strings.Cut(words[0], "=")
		switch name {
		case "RATESYNC_REDIS_URL":
			env = append(env, name+"="+testenv.NewRedis(t).URL)
		case "RATESYNC_POSTGRES_URL":
			env = append(env, name+"="+testenv.NewPostgres(t).URL)
		default:
			env = append(env, words[0])
		}
		words = words[1:]
	}
	if len(words) == 0 || words[0] != "./ratesync-node" {
		t.Fatalf("want ./ratesync-node ARGS..., after environment assignments; got %q", words)
	}
	args := repoPaths(words[1:])
	cfg := docsListeners{Node: struct{ Listen string }{"127.0.0.1:8080"}}
	if i := slices.Index(args, "-config"); i >= 0 && i+1 < len(args) {
		data, err := os.ReadFile(args[i+1])
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			t.Fatal(err)
		}
	}
	flag := func(name, value string) string { // the last -name's value, else value
		for i := len(args) - 2; i >= 0; i-- {
			if args[i] == name {
				return args[i+1]
			}
		}
		return value
	}
	listens := map[string]string{"-listen": flag("-listen", cfg.Node.Listen)}
	if cfg.Gateway != nil {
		listens["-gateway-listen"] = flag("-gateway-listen", cmp.Or(cfg.Gateway.Listen, "127.0.0.1:8000"))
		u, err := url.Parse(cfg.Gateway.Upstream)
		if err != nil {
			t.Fatal(err)
		}
		if host := u.Host; host == listens["-gateway-listen"] || host == listens["-listen"] {
			t.Errorf("gateway.upstream %s is the node's own listener %s: the gateway would proxy to itself", cfg.Gateway.Upstream, host)
		}
	}
	if cfg.RLS != nil {
		listens["-rls-listen"] = flag("-rls-listen", cmp.Or(cfg.RLS.Listen, "127.0.0.1:8081"))
	}
	for f, a := range listens {
		for g, b := range listens {
			if f < g && a == b {
				t.Errorf("%s and %s are both %s", f, g, a)
			}
		}
	}
	for f := range listens {
		args = append(args, f, "127.0.0.1:0")
	}
	base, logs, stop := runNode(t, args, env)
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz: %d %s", resp.StatusCode, body)
	}
	if cfg.Gateway != nil {
		testDocsGateway(t, cfg.Gateway.Upstream, logs)
	}
	if err := stop(); err != nil {
		t.Errorf("the node's stop: %v", err)
	}
}

// docsListeners is what TestDocsNodeCommands reads of a configuration file:
// the addresses it gives, and the gateway's upstream.
type docsListeners struct {
	Node    struct{ Listen string }
	Gateway *struct{ Listen, Upstream string }
	RLS     *struct{ Listen string }
}

// gatewayListeningRE finds the gateway's address in the node's log, text or
// JSON.
var gatewayListeningRE = regexp.MustCompile(`gateway listening"?[ ,]"?url"?[=:]"?(http://[0-9.:]+)`)

// testDocsGateway checks that the gateway answers 502 while nothing listens
// on its upstream.
func testDocsGateway(t *testing.T, upstream string, logs fmt.Stringer) {
	var gw string
	for deadline := time.Now().Add(10 * time.Second); gw == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := gatewayListeningRE.FindStringSubmatch(logs.String()); m != nil {
			gw = m[1]
		}
	}
	if gw == "" {
		t.Fatalf("no gateway listening line in the log:\n%s", logs)
	}
	u, _ := url.Parse(upstream)
	if c, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		_ = c.Close()
		t.Logf("something listens on the upstream %s: the gateway's 502 is not checked", u.Host)
		return
	}
	resp, err := http.Get(gw + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	var p struct {
		Status  int    `json:"status"`
		Message string `json:"message"`
	}
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(body, &p) != nil || p.Status != 502 || p.Message != "upstream unavailable" {
		t.Errorf("the gateway, its upstream down: %d %s %s; want 502 problem+json with \"message\":\"upstream unavailable\"", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

// TestDocsConfigErrors writes the file of each config block as node.yaml,
// runs the node with the block's command line, and compares the last lines
// of what the node printed as it refused to start (its log, then, for an
// error in the configuration, "ratesync-node: " and the error, as main
// prints it) with the page's output, where "…" stands for any text.
func TestDocsConfigErrors(t *testing.T) {
	n := 0
	for _, page := range docPages(t) {
		for _, b := range pageBlocks(t, page) {
			if b.mark != readmeConfigMark {
				continue
			}
			n++
			cmds, err := shellCommands(b.commands, readmeEnv)
			if err != nil || len(cmds) != 1 || cmds[0][0] != "./ratesync-node" {
				t.Fatalf("%s:%d: want one command, ./ratesync-node ARGS...; got %q (%v)", page, b.line, cmds, err)
			}
			file := filepath.Join(t.TempDir(), "node.yaml")
			if err := os.WriteFile(file, []byte(b.file+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			args := slices.Clone(cmds[0][1:])
			for i, a := range args {
				if a == "node.yaml" {
					args[i] = file
				}
			}
			args = append(args, "-listen", "127.0.0.1:0")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			var logs bytes.Buffer
			err = runWithLog(ctx, args, nil, &logs)
			cancel()
			if err == nil {
				t.Errorf("%s:%d: the node started; the page shows:\n%s", page, b.line, b.output)
				continue
			}
			printed := logs.String()
			if printed == "" { // an error in the configuration: main prints it
				printed = "ratesync-node: " + err.Error() + "\n"
			}
			printed = strings.ReplaceAll(printed, file, "node.yaml")
			lines := strings.Split(strings.TrimSuffix(printed, "\n"), "\n")
			want := strings.Split(b.output, "\n")
			if len(lines) < len(want) || !matchElided(want, lines[len(lines)-len(want):]) {
				t.Errorf("%s:%d: the node printed\n%s\nthe page shows, as its last lines,\n%s", page, b.line, printed, b.output)
			}
		}
	}
	if n == 0 {
		t.Errorf("no %q block in README.md or docs/", readmeConfigMark)
	}
}

// matchElided reports whether each line of got is its line of want, where
// "…" in want stands for any text.
func matchElided(want, got []string) bool {
	for i, w := range want {
		parts := strings.Split(w, "…")
		for j, p := range parts {
			parts[j] = regexp.QuoteMeta(p)
		}
		if !regexp.MustCompile("^" + strings.Join(parts, ".*") + "$").MatchString(got[i]) {
			return false
		}
	}
	return true
}

// TestDocsConfigFiles checks the pages' YAML: each config-valid block is a
// configuration the node accepts, and each file block is part of the file
// it names, as shown.
func TestDocsConfigFiles(t *testing.T) {
	n := 0
	for _, page := range docPages(t) {
		for _, b := range pageBlocks(t, page) {
			switch {
			case b.mark == readmeValidMark:
				n++
				file := filepath.Join(t.TempDir(), "node.yaml")
				if err := os.WriteFile(file, []byte(b.file+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				_, _, stop := runNode(t, []string{"-config", file, "-listen", "127.0.0.1:0"}, nil) // fails the test unless it starts
				if err := stop(); err != nil {
					t.Errorf("%s:%d: the node's stop: %v", page, b.line, err)
				}
			case strings.HasPrefix(b.mark, readmeFilePrefix):
				n++
				data, err := os.ReadFile(filepath.Join("..", "..", b.commands))
				if err != nil {
					t.Errorf("%s:%d: %v", page, b.line, err)
					continue
				}
				if !strings.Contains("\n"+string(data), "\n"+b.file+"\n") {
					t.Errorf("%s:%d: %s lacks the lines\n%s", page, b.line, b.commands, b.file)
				}
			}
		}
	}
	if n == 0 {
		t.Errorf("no %q or %q block in README.md or docs/", readmeValidMark, readmeFilePrefix+"PATH -->")
	}
}

// TestDocsGatewayTimeout runs a gateway in front of an upstream that never
// answers, with gateway.timeout 200ms, and compares its answer with each
// gateway-timeout block, whose detail gives the default timeout, 30s.
func TestDocsGatewayTimeout(t *testing.T) {
	var want []readmeBlock
	for _, page := range docPages(t) {
		for _, b := range pageBlocks(t, page) {
			if b.mark == readmeTimeoutMark {
				b.commands = page // for the messages
				want = append(want, b)
			}
		}
	}
	if len(want) == 0 {
		t.Fatalf("no %q block in README.md or docs/", readmeTimeoutMark)
	}
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Close() })
	go func() { // accept, read, never answer
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	file := filepath.Join(t.TempDir(), "node.yaml")
	yaml := "gateway:\n  upstream: http://" + up.Addr().String() + "\n  timeout: 200ms\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, logs, stop := runNode(t, []string{"-config", file, "-listen", "127.0.0.1:0", "-gateway-listen", "127.0.0.1:0"}, nil)
	var gw string
	for deadline := time.Now().Add(10 * time.Second); gw == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := gatewayListeningRE.FindStringSubmatch(logs.String()); m != nil {
			gw = m[1]
		}
	}
	if gw == "" {
		t.Fatalf("no gateway listening line in the log:\n%s", logs)
	}
	resp, err := http.Get(gw + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Errorf("the gateway answered %d, want 504", resp.StatusCode)
	}
	var got any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("the gateway's body %q: %v", body, err)
	}
	for _, b := range want {
		var w any
		if err := json.Unmarshal([]byte(strings.ReplaceAll(b.output, "(30s)", "(200ms)")), &w); err != nil {
			t.Fatalf("%s:%d: %v", b.commands, b.line, err)
		}
		for _, d := range compareJSON("body", w, got) {
			t.Errorf("%s:%d: %s\nthe page shows:\n%s\nthe gateway answered (timeout 200ms):\n%s", b.commands, b.line, d, b.output, body)
		}
	}
	if err := stop(); err != nil {
		t.Errorf("the node's stop: %v", err)
	}
}
