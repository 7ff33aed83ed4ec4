package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestRun(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[r.Method+" "+r.URL.Path+" "+r.Header.Get("X-Consumer-Id")+" "+string(b)]++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	var out strings.Builder
	err := run([]string{"-url", srv.URL + "/v1/{key}", "-H", "X-Consumer-ID: c{key}", "-body", "b{key}",
		"-keys", "2", "-order", "round-robin", "-c", "1", "-n", "10", "-warmup", "0"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "10 requests") || !strings.Contains(out.String(), "status {200: 10}") {
		t.Errorf("output %q: want 10 requests answered 200", out.String())
	}
	for _, k := range []string{"0", "1"} {
		if n := seen["POST /v1/"+k+" c"+k+" b"+k]; n != 5 {
			t.Errorf("key %s: %d requests, want 5 (%v)", k, n, seen)
		}
	}
}

func TestRunErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-url", "https://example.com/"}, `-url "https://example.com/": want http://host[:port]/path`},
		{[]string{"-n", "0", "-d", "0"}, "the run needs a bound"},
		{[]string{"-order", "random"}, `order "random"`},
		{[]string{"-H", "no colon"}, `"no colon": want Name: value`},
		{[]string{"-keys", "5"}, "Keys 5: no {key}"},
		{[]string{"-url", "http://127.0.0.1:1/", "-n", "3", "-warmup", "0"}, "every request failed"},
		{[]string{"stray"}, `unexpected arguments ["stray"]`},
	}
	for _, tt := range tests {
		err := run(tt.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run %q: %v, want an error saying %q", tt.args, err, tt.want)
		}
	}
}
