// Package nodetest is what the node's tests share: a node run in the test's
// process, and its API's URL read off its log. For tests only.
package nodetest

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"sync"
	"testing"
	"time"
)

// The node's "listening" log line, in text and in JSON: its API's URL.
var (
	ListeningRE     = regexp.MustCompile(`msg=listening url=(http://\S+)`)
	ListeningJSONRE = regexp.MustCompile(`"msg":"listening","url":"(http://[^"]+)"`)
)

// LogWriter collects a node's log and hands out its API's URL. It is safe
// for concurrent use.
type LogWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	urls chan string
}

// Write keeps p and, when it is the listening line, its URL.
func (w *LogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m := ListeningRE.FindSubmatch(p); m != nil {
		w.urls <- string(m[1])
	}
	if m := ListeningJSONRE.FindSubmatch(p); m != nil {
		w.urls <- string(m[1])
	}
	return w.buf.Write(p)
}

// String returns the log so far.
func (w *LogWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// Run runs run in the background, its log into a LogWriter, and returns
// the node's API URL once it listens, the log, and a function that stops
// the node and returns run's error. The test fails when the node does not
// listen, or stop does not return, within a minute; its cleanup stops the
// node.
func Run(t *testing.T, run func(ctx context.Context, log io.Writer) error) (string, *LogWriter, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &LogWriter{urls: make(chan string, 4)}
	done := make(chan error, 1)
	go func() { done <- run(ctx, logs) }()
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
		t.Cleanup(cancel)
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
