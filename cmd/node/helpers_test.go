package main

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/ratesync/ratesync/internal/node/nodetest"
	"github.com/ratesync/ratesync/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// runNode runs the node in the test's process with args and env, and
// returns its API URL, its log and a function that stops it (nodetest.Run).
func runNode(t *testing.T, args, env []string) (string, *nodetest.LogWriter, func() error) {
	t.Helper()
	return nodetest.Run(t, func(ctx context.Context, log io.Writer) error { return runWithLog(ctx, args, env, log) })
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
