package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/redis"
)

var scriptInstructions = flag.Bool("script.instructions", false, "run TestScriptInstructions: Redis's instructions per synchronous decision, counted under valgrind (a few minutes)")

// TestScriptInstructions counts the instructions a Redis server runs per
// synchronous decision: what check.lua costs it in user space, a count
// that repeats from run to run, unlike CPU time on a shared machine. The
// server runs under valgrind's callgrind; each case zeroes its counters,
// makes its calls and dumps them. A case is CheckAndCount calls of n
// checks (distinct keys, one sliding window limit of a minute never
// reached, an integer cost) on a store of the default 16 shards or of
// one, after 10,000 keys were counted in the previous window and in the
// current one (the hashes as a minute of traffic leaves them). The
// baseline, in the same run: envoy ratelimit's Redis work for n decisions,
// one pipeline of INCRBY and EXPIRE per decision. Kernel work (the socket
// reads and writes, the event loop's waits) is not counted: CPU time
// adds it per call.
func TestScriptInstructions(t *testing.T) {
	if !*scriptInstructions {
		t.Skip("counts under valgrind for minutes: run with -script.instructions")
	}
	for _, tool := range []string{"valgrind", "callgrind_control", "redis-server"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	dir := t.TempDir()
	port := strconv.Itoa(freePorts(t, 1)[0])
	srv := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "cg.out"),
		"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	srv.Dir = dir
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	ctx := context.Background()
	cl := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:" + port, ContextTimeoutEnabled: true, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = cl.Close() })
	for deadline := time.Now().Add(time.Minute); cl.Ping(ctx).Err() != nil; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("redis-server under valgrind: no PONG within a minute")
		}
	}
	pid := strconv.Itoa(srv.Process.Pid)
	dumps := 0
	// count returns the instructions the server ran in run.
	count := func(run func()) float64 {
		t.Helper()
		if out, err := exec.Command("callgrind_control", "-z", pid).CombinedOutput(); err != nil {
			t.Fatalf("callgrind_control -z: %v: %s", err, out)
		}
		run()
		if out, err := exec.Command("callgrind_control", "-d", pid).CombinedOutput(); err != nil {
			t.Fatalf("callgrind_control -d: %v: %s", err, out)
		}
		dumps++
		return callgrindTotal(t, filepath.Join(dir, fmt.Sprintf("cg.out.%d", dumps)))
	}

	const calls, nkeys = 300, 10_000
	now := time.Now().Truncate(time.Minute).Add(30 * time.Second)
	limits := []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 1e15}}
	check := func(i int, at time.Time) strategy.Check {
		return strategy.Check{Namespace: "bench", Key: "key-" + strconv.Itoa(i%nkeys), Cost: 1, Now: at, Limits: limits}
	}
	var b strings.Builder
	b.WriteString("| shards | checks per call | instructions per call | per decision | INCRBY+EXPIRE per decision | x INCRBY+EXPIRE |\n|---|---|---|---|---|---|\n")
	for _, shards := range []int{0, 1} {
		s, err := redis.New(cl, redis.Config{Prefix: fmt.Sprintf("sc%d", shards), Shards: shards})
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(1)
		apply := func(checks []strategy.Check) {
			seq++
			if _, err := s.CheckAndCount(ctx, "node-1", seq, checks); err != nil {
				t.Fatal(err)
			}
		}
		for _, at := range []time.Time{now.Add(-time.Minute), now} {
			for i := 0; i < nkeys; i += 100 {
				checks := make([]strategy.Check, 100)
				for j := range checks {
					checks[j] = check(i+j, at)
				}
				apply(checks)
			}
		}
		for _, n := range []int{1, 12, 32} {
			batches := make([][]strategy.Check, calls)
			for c := range batches {
				batches[c] = make([]strategy.Check, n)
				for j := range batches[c] {
					batches[c][j] = check((c*n+j)*997, now) // spread over the shards, as uniform keys are
				}
			}
			ours := count(func() {
				for _, checks := range batches {
					apply(checks)
				}
			})
			base := count(func() {
				for _, checks := range batches {
					p := cl.Pipeline()
					for _, c := range checks {
						p.IncrBy(ctx, "base:"+c.Key, 1)
						p.Expire(ctx, "base:"+c.Key, time.Minute)
					}
					if _, err := p.Exec(ctx); err != nil {
						t.Fatal(err)
					}
				}
			})
			per, basePer := ours/float64(calls*n), base/float64(calls*n)
			label := shards
			if shards == 0 {
				label = 16 // the default
			}
			fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %.2f |\n", label, n,
				thousands(int(ours/calls)), thousands(int(per)), thousands(int(basePer)), per/basePer)
		}
	}
	t.Logf("Redis instructions (user space, callgrind), %d calls per case:\n%s", calls, b.String())
}

// callgrindTotal reads the instruction total of a callgrind dump.
func callgrindTotal(t *testing.T, file string) float64 {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, p := range []string{"summary: ", "totals: "} {
			if v, ok := strings.CutPrefix(sc.Text(), p); ok {
				n, err := strconv.ParseFloat(strings.Fields(v)[0], 64)
				if err != nil {
					t.Fatalf("%s: %q: %v", file, sc.Text(), err)
				}
				return n
			}
		}
	}
	t.Fatalf("%s: no summary or totals line", file)
	return 0
}
