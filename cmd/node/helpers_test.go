package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var listeningJSONRE = regexp.MustCompile(`"msg":"listening","url":"(http://[^"]+)"`)

// logWriter collects a node's logs and hands out its API URL.
type logWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	urls chan string
}

func newLogWriter() *logWriter { return &logWriter{urls: make(chan string, 4)} }

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m := listeningRE.FindSubmatch(p); m != nil {
		w.urls <- string(m[1])
	}
	if m := listeningJSONRE.FindSubmatch(p); m != nil {
		w.urls <- string(m[1])
	}
	return w.buf.Write(p)
}

func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// runNode runs run in the background and returns its API URL and a stop
// function returning run's error.
func runNode(t *testing.T, args, env []string) (string, *logWriter, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := newLogWriter()
	done := make(chan error, 1)
	go func() { done <- runWithLog(ctx, args, env, logs) }()
	stop := func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(60 * time.Second):
			t.Fatalf("run did not return within 60s\n%s", logs)
			return nil
		}
	}
	select {
	case url := <-logs.urls:
		t.Cleanup(func() { cancel() })
		return url, logs, stop
	case err := <-done:
		cancel()
		t.Fatalf("run returned before listening: %v\n%s", err, logs)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("not listening within 60s\n%s", logs)
	}
	return "", nil, nil
}

// writeFile writes data to the file name.
func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
