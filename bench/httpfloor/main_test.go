package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

var listening = regexp.MustCompile(`httpfloor: (\w+) listening on (http://\S+)`)

// lines is a writer handing run's log lines to a channel.
type lines chan string

func (l lines) Write(p []byte) (int, error) {
	for _, s := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		l <- s
	}
	return len(p), nil
}

// start runs the command with args until the test ends and returns its
// URL.
func start(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(lines, 16)
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run %q: %v", args, err)
		}
	})
	select {
	case line := <-out:
		m := listening.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("first line %q, want the listening line", line)
		}
		return m[2]
	case err := <-done:
		t.Fatalf("run %q ended: %v", args, err)
	case <-time.After(10 * time.Second):
		t.Fatal("not listening within 10s")
	}
	return ""
}

func post(t *testing.T, url, body string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestModes(t *testing.T) {
	floorURL := start(t, "-mode", "floor")
	code, body, h := post(t, floorURL+"/v1/check", `{"namespace":"n","key":"user:1","limits":[{"limit":1e9,"window":"1m"}]}`)
	if code != 200 || body != `{"allowed":true}`+"\n" || h.Get("Content-Type") != "application/json" {
		t.Errorf("floor, a check body: %d %q %v", code, body, h)
	}
	if code, _, _ := post(t, floorURL+"/v1/check", `{"limits":"not a list"}`); code != http.StatusBadRequest {
		t.Errorf("floor, a body of the wrong shape: %d, want 400", code)
	}
	up := start(t, "-mode", "upstream")
	px := start(t, "-mode", "proxy", "-upstream", up)
	for _, u := range []string{up, px} {
		if code, body, _ := post(t, u+"/any/path", "payload"); code != 200 || body != "ok\n" {
			t.Errorf("%s: %d %q, want 200 ok", u, code, body)
		}
	}
}

func TestProxyUpstreamDown(t *testing.T) {
	px := start(t, "-mode", "proxy", "-upstream", "http://127.0.0.1:1")
	if code, _, _ := post(t, px, ""); code != http.StatusBadGateway {
		t.Errorf("upstream down: %d, want 502", code)
	}
}

func TestFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-mode", "echo"}, `-mode "echo": want floor, upstream or proxy`},
		{[]string{"-mode", "proxy"}, `-upstream "": want http://host:port`},
		{[]string{"-mode", "proxy", "-upstream", "https://example.com"}, `-upstream "https://example.com": want http://host:port`},
		{[]string{"-mode", "floor", "-upstream", "http://h:1"}, `-upstream "http://h:1": only with -mode proxy`},
		{[]string{"-listen", "nowhere"}, "nowhere"},
		{[]string{"extra"}, `unexpected arguments ["extra"]`},
	}
	for _, tt := range tests {
		err := run(context.Background(), tt.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run %q: %v, want an error saying %q", tt.args, err, tt.want)
		}
	}
}
