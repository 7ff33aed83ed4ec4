package testenv

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// lifetimeEnv tells a test binary started by TestServersDieWithTheBinary
// which server TestLifetimeHelper starts.
const lifetimeEnv = "RATESYNC_TESTENV_LIFETIME"

// TestServersDieWithTheBinary starts servers in a child test binary, kills
// that binary with SIGKILL, so that no cleanup runs, and wants the servers
// gone: the parent-death signal, not the harness, ends them.
func TestServersDieWithTheBinary(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"redis", "redis-paused", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			if kind == "postgres" {
				if bins, _, how := findPostgres(); bins == nil {
					unavailable(t, "PostgreSQL", how)
				}
			} else {
				redisBinary(t)
			}
			var stderr bytes.Buffer
			cmd := exec.Command(os.Args[0], "-test.run=^TestLifetimeHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), lifetimeEnv+"="+kind)
			cmd.Stderr = &stderr
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatalf("start the child test binary: %v", err)
			}
			t.Cleanup(func() {
				_ = stdin.Close()
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			})

			line := make(chan string, 1)
			var out bytes.Buffer
			go func() {
				s := bufio.NewScanner(stdout)
				for s.Scan() {
					if rest, ok := strings.CutPrefix(s.Text(), "servers "); ok {
						line <- rest
						break
					}
					out.WriteString(s.Text() + "\n")
				}
				close(line)
				_, _ = io.Copy(io.Discard, stdout)
			}()
			var rest string
			select {
			case l, ok := <-line:
				if !ok {
					_ = cmd.Wait()
					t.Fatalf("the child test binary started no server:\n%s%s", out.String(), stderr.String())
				}
				rest = l
			case <-time.After(2 * time.Minute):
				t.Fatalf("the child test binary started no server within 2 minutes:\n%s", stderr.String())
			}
			root, pidText, _ := strings.Cut(rest, " ")
			var pids []int
			for _, f := range strings.Fields(pidText) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("child reported %q", rest)
				}
				pids = append(pids, pid)
			}
			t.Cleanup(func() { _ = os.RemoveAll(root) }) // left behind by the child

			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			err = pollUntil(10*time.Second, func(context.Context) error {
				for _, pid := range pids {
					if alive(pid) {
						st, _ := procState(pid)
						return fmt.Errorf("process %d in state %c", pid, st)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("10s after the test binary was killed: %v; want processes %v gone", err, pids)
			}
		})
	}
}

// TestLifetimeHelper runs in the child binary of
// TestServersDieWithTheBinary: it starts a server, prints "servers ROOT
// PID...", and waits for its standard input to close.
func TestLifetimeHelper(t *testing.T) {
	kind := os.Getenv(lifetimeEnv)
	if kind == "" {
		t.Skip("runs in the child binary of TestServersDieWithTheBinary")
	}
	var root string
	var pids []int
	switch kind {
	case "redis", "redis-paused":
		r := PrivateRedis(t)
		root, pids = r.srv.root, []int{r.srv.pid()}
		if kind == "redis-paused" {
			r.Pause(t)
		}
	case "postgres":
		p := PrivatePostgres(t)
		// A backend, in a session of its own, must go too.
		var backend int
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool := p.Pool(t)
		if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
			t.Fatal(err)
		}
		root, pids = p.srv.root, []int{p.srv.pid(), backend}
	default:
		t.Fatalf("%s=%q", lifetimeEnv, kind)
	}
	fmt.Print("servers ", root)
	for _, pid := range pids {
		fmt.Print(" ", pid)
	}
	fmt.Println()
	_, _ = io.Copy(io.Discard, os.Stdin)
}
