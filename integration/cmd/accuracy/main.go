// Command accuracy measures how far over a limit N ratesync nodes sharing one
// store admit, at a given sync rate: it runs in-process nodes against a
// memory, Redis or PostgreSQL store under an open-loop load, counts the hits
// admitted per window exactly, and prints one CSV row per run:
//
//	store,nodes,sync_rate,limit,window,offered_per_s,max_admitted_per_window,over_admission_pct,bound_pct
//
// bound_pct is 100·λ·T/L: λ the offered rate of the key, T the sync interval
// plus the measured store round trip (reference/numbers.md section 2).
//
//	go run ./integration/cmd/accuracy -nodes 4 -sync 250ms
//	go run ./integration/cmd/accuracy -store redis -redis-url redis://127.0.0.1:6379/0 -sweep -csv out.csv -svg out.svg
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "accuracy:", err)
		os.Exit(1)
	}
}

type options struct {
	store       string
	redisURL    string
	postgresURL string
	nodes       []int
	syncs       []time.Duration
	limit       float64
	window      time.Duration
	rate        float64
	keys        int
	zipf        float64
	duration    time.Duration
	spread      string
	poisson     bool
	sliding     bool
	nearLimit   bool
	workers     int
	csv         string
	svg         string
}

// defaultSweep is the grid -sweep runs.
var (
	sweepNodes = []int{1, 2, 4, 8}
	sweepSyncs = []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second}
)

func parse(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("accuracy", flag.ContinueOnError)
	f := o.flags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := o.grid(f); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// gridFlags are the flags that choose the runs: lists, or -sweep.
type gridFlags struct {
	nodes, syncs *string
	sweep        *bool
}

// flags defines the flags of o on fs.
func (o *options) flags(fs *flag.FlagSet) gridFlags {
	fs.StringVar(&o.store, "store", "memory", "store: memory, redis or postgres")
	fs.StringVar(&o.redisURL, "redis-url", os.Getenv("RATESYNC_REDIS_URL"), "Redis URL (-store redis)")
	fs.StringVar(&o.postgresURL, "postgres-url", os.Getenv("RATESYNC_POSTGRES_URL"), "PostgreSQL URL (-store postgres)")
	nodes := fs.String("nodes", "4", "node count, or a comma-separated list")
	syncs := fs.String("sync", "250ms", "sync rate (0: synchronous), or a comma-separated list")
	fs.Float64Var(&o.limit, "limit", 100, "hits allowed per window")
	fs.DurationVar(&o.window, "window", 5*time.Second, "window size")
	fs.Float64Var(&o.rate, "rate", 100, "offered hits per second, all keys")
	fs.IntVar(&o.keys, "keys", 1, "distinct keys (1: one hot key)")
	fs.Float64Var(&o.zipf, "zipf", 1.1, "Zipf exponent over -keys (> 1), else uniform")
	fs.DurationVar(&o.duration, "duration", 12*time.Second, "how long each run offers load")
	fs.StringVar(&o.spread, "spread", "round-robin", "arrivals to nodes: round-robin, random or sticky")
	fs.BoolVar(&o.poisson, "poisson", false, "Poisson arrivals instead of constant")
	fs.BoolVar(&o.sliding, "sliding", false, "sliding-window limit (default fixed: admitted per window is then exact to count)")
	fs.BoolVar(&o.nearLimit, "near-limit", false, "decide near-limit keys in the store (namespace NearLimit)")
	fs.IntVar(&o.workers, "workers", 32, "concurrent callers")
	sweep := fs.Bool("sweep", false, "run the default grid: nodes 1,2,4,8 x sync 0,10ms,50ms,100ms,250ms,500ms,1s (without 0 for -near-limit)")
	fs.StringVar(&o.csv, "csv", "", "also write the rows to this CSV file")
	fs.StringVar(&o.svg, "svg", "", "write a chart of over-admission against sync rate to this SVG file")
	return gridFlags{nodes: nodes, syncs: syncs, sweep: sweep}
}

// grid sets the node counts and sync rates to run, from the parsed flags.
func (o *options) grid(f gridFlags) error {
	if *f.sweep {
		o.nodes = sweepNodes
		for _, s := range sweepSyncs {
			if s > 0 || !o.nearLimit { // near-limit is a periodic mode
				o.syncs = append(o.syncs, s)
			}
		}
		return nil
	}
	var err error
	if o.nodes, err = parseList(*f.nodes, "nodes", strconv.Atoi); err != nil {
		return err
	}
	o.syncs, err = parseList(*f.syncs, "sync", time.ParseDuration)
	return err
}

// validate checks the options once parsed.
func (o *options) validate() error {
	switch {
	case o.store != "memory" && o.store != "redis" && o.store != "postgres":
		return fmt.Errorf("-store %q: must be memory, redis or postgres", o.store)
	case o.limit <= 0:
		return fmt.Errorf("-limit %v: must be > 0", o.limit)
	case o.window <= 0 || o.window%time.Millisecond != 0:
		return fmt.Errorf("-window %v: must be > 0 and whole milliseconds", o.window)
	case o.rate <= 0:
		return fmt.Errorf("-rate %v: must be > 0", o.rate)
	case o.keys <= 0:
		return fmt.Errorf("-keys %d: must be > 0", o.keys)
	case o.duration < o.window:
		return fmt.Errorf("-duration %v: must be at least -window %v (a whole window must be measured)", o.duration, o.window)
	}
	for _, n := range o.nodes {
		if n <= 0 {
			return fmt.Errorf("-nodes %d: must be > 0", n)
		}
	}
	for _, s := range o.syncs {
		if s < 0 {
			return fmt.Errorf("-sync %v: must be >= 0 (0: synchronous)", s)
		}
		if s == 0 && o.nearLimit {
			return errors.New("-near-limit needs a periodic -sync (> 0)")
		}
	}
	return nil
}

func parseList[T any](s, name string, conv func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		v, err := conv(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("-%s %q: %v", name, f, err)
		}
		out = append(out, v)
	}
	return out, nil
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	st, err := openStore(ctx, o)
	if err != nil {
		return err
	}
	defer st.close()
	var rows []row
	fmt.Fprintln(stdout, header)
	for _, n := range o.nodes {
		for _, s := range o.syncs {
			r, err := measure(ctx, o, st, n, s)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, r.csv())
			rows = append(rows, r)
		}
	}
	if o.csv != "" {
		if err := writeCSV(o.csv, rows); err != nil {
			return err
		}
	}
	if o.svg != "" {
		if err := writeSVG(o.svg, rows, o); err != nil {
			return err
		}
	}
	return nil
}
