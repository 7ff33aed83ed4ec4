// Command accuracy measures how far over a limit N ratesync nodes sharing one
// store admit, at a given sync rate: it runs in-process nodes against a
// memory, Redis or PostgreSQL store under an open-loop load, records every
// decision, and prints one CSV row per run.
//
// Window limits (-algorithm fixed_window, the default, or sliding_window):
//
//	store,nodes,sync_rate,limit,window,offered_per_s,max_admitted_per_window,over_admission_pct,min_admitted_pct,store_calls_per_100,bound_pct
//
// max_admitted_per_window is the most hits of one key admitted in one whole
// fixed window (sliding_window: in any span of the window's length);
// over_admission_pct is 100·(max_admitted_per_window − limit)/limit;
// bound_pct is 100·λ·T/L: λ the offered rate of the key, T the sync interval
// plus the measured store round trip (reference/numbers.md section 2).
//
// Both formats end their figures with:
//
//   - min_admitted_pct: the fewest hits of one key admitted in one whole
//     epoch-aligned window of the limit's size (wholly inside the run; for
//     a sliding window too, and for a bucket the spans of -window), as a
//     percentage of limit, or of the key's hits offered in that window when
//     fewer; windows in which a key was not offered do not count. A
//     bucket's limit is what it refills in a window, what it admits there
//     under load once its burst is spent (allowed_in_window, b + limit, is
//     only reached in the window the full bucket starts), so an exact
//     limiter under load reads 100;
//   - store_calls_per_100: store calls per 100 decisions over the run: for
//     a leased namespace, the grant requests the nodes sent (the sum of
//     ratelimiting.LeaseStats.StoreCalls); otherwise every call the nodes
//     made to the strategy (pushes, fetches, checks, buckets, time),
//     counted by a wrapper around it. Standard error shows, for every run,
//     every call made during the load, leased runs included.
//
// The column store reads store+near-limit with -near-limit and
// store+leases for a leased run.
//
// Buckets (-algorithm token_bucket or leaky_bucket, capacity -burst b, or a
// list that names one beside window algorithms, which are then reported the
// same way):
//
//	store,algorithm,nodes,sync_rate,limit,window,burst,offered_per_s,duration,admitted,long_run_rate,max_admitted_in_window,allowed_in_window,burst_pct,min_admitted_pct,store_calls_per_100
//
// With r = limit/window the sustained rate and D = -duration:
//
//   - admitted is the number of hits admitted in the run (its arrivals
//     come over D);
//   - long_run_rate = (admitted − a0) / (r·D) is the admitted rate as a
//     multiple of r, where a0 is what the limit rightly admits at once on
//     top of its rate: b for a bucket (it starts full), 0 for a window (the
//     run starts on a window boundary, so its windows are whole). 1 is
//     exact; above 1 is over-admission that no debt paid back by the end;
//   - max_admitted_in_window is the most hits admitted in any span
//     [t, t+window) by the time the node was asked (fixed_window: in one
//     whole fixed window, as above);
//   - allowed_in_window is what the limit allows in such a span: b + r·window
//     (that is b + limit) for a bucket, limit for a window;
//   - burst_pct = 100·(max_admitted_in_window − allowed_in_window) /
//     allowed_in_window.
//
// -precision D (or a list; 0 is Kong's two windows) counts the
// sliding_window runs in sub-windows of D (ratelimiting.Limit.Precision):
// the limit's window stays -window, and the namespace gets D among its
// window sizes. Each precision of the list is a run of its own, and the
// rows take the second format with a precision column after algorithm.
//
// -leases leases the namespace (namespace.Config.Leases): each node decides
// from quota the store granted it, at each -sync, which must then be > 0.
// -leases=both makes each run of a -sync > 0 twice, periodic and leased
// (a -sync 0 run stays synchronous), so that one sweep and one chart hold
// the three modes.
//
// -spread says which node each arrival goes to: round-robin (the default),
// random, sticky (a key always to one node), or skewed: 90% of the
// arrivals to node 0, the rest round-robin over the others.
//
// The offered load is -rate hits per second, or -load times r; -load
// defaults to 10 for buckets when -rate is not given. -parallel N makes N
// runs at once, each with its own nodes and namespace on the one store
// (a run of 1,000 hits/s takes about 2% of a core); before its load, every
// node of a run decides once on another key, so that no run's first
// decisions wait for its nodes to start.
//
//	go run ./integration/cmd/accuracy -nodes 4 -sync 250ms
//	go run ./integration/cmd/accuracy -store redis -redis-url redis://127.0.0.1:6379/0 -sweep -csv out.csv -svg out.svg
//	go run ./integration/cmd/accuracy -algorithm token_bucket -limit 100 -window 1s -nodes 4 -sync 1s -duration 2m
//	go run ./integration/cmd/accuracy -algorithm sliding_window -precision 0,1s -limit 600 -window 6s -load 10 -sync 250ms,1s,2s
//	go run ./integration/cmd/accuracy -store redis -redis-url redis://127.0.0.1:6379/0 -leases -sync 250ms -window 1s -load 10 -spread skewed
//	go run ./integration/cmd/accuracy -store redis -redis-url redis://127.0.0.1:6379/0 -leases=both -nodes 1,2,4,8 -sync 0,50ms,250ms,1s -window 1s -load 10 -svg leases.svg
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ratesync/ratesync/integration"
	"github.com/ratesync/ratesync/ratelimiting"
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
	algorithms  []ratelimiting.Algorithm
	precisions  []time.Duration // of sliding_window runs; nil: none given
	limit       float64
	window      time.Duration
	burst       float64
	rate        float64
	load        float64
	keys        int
	zipf        float64
	duration    time.Duration
	spread      string
	poisson     bool
	nearLimit   bool
	leases      leaseMode
	parallel    int
	workers     int
	csv         string
	svg         string
}

// defaultSweep is the grid -sweep runs.
var (
	sweepNodes = []int{1, 2, 4, 8}
	sweepSyncs = []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second}
)

// defaultBucketLoad is the offered load of bucket runs, a multiple of the
// bucket's rate, when neither -load nor -rate is given.
const defaultBucketLoad = 10

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
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if err := o.grid(f, set); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.load == 0 && !set["rate"] && o.buckets() {
		o.load = defaultBucketLoad
	}
	if o.load > 0 {
		o.rate = o.load * o.limit / o.window.Seconds()
	}
	return o, nil
}

// gridFlags are the flags that choose the runs: lists, or -sweep.
type gridFlags struct {
	nodes, syncs, algorithms, precisions *string
	sliding, sweep                       *bool
}

// flags defines the flags of o on fs.
func (o *options) flags(fs *flag.FlagSet) gridFlags {
	fs.StringVar(&o.store, "store", "memory", "store: memory, redis or postgres")
	fs.StringVar(&o.redisURL, "redis-url", os.Getenv("RATESYNC_REDIS_URL"), "Redis URL (-store redis)")
	fs.StringVar(&o.postgresURL, "postgres-url", os.Getenv("RATESYNC_POSTGRES_URL"), "PostgreSQL URL (-store postgres)")
	nodes := fs.String("nodes", "4", "node count, or a comma-separated list")
	syncs := fs.String("sync", "250ms", "sync rate (0: synchronous), or a comma-separated list")
	algorithms := fs.String("algorithm", "fixed_window", "fixed_window, sliding_window, token_bucket or leaky_bucket, or a comma-separated list")
	precisions := fs.String("precision", "", "sliding_window: sub-window size (0: Kong's two windows), or a comma-separated list; each a run")
	fs.Float64Var(&o.limit, "limit", 100, "hits allowed per window (buckets: the rate is limit per window)")
	fs.DurationVar(&o.window, "window", 5*time.Second, "window size")
	fs.Float64Var(&o.burst, "burst", 0, "bucket capacity (0: -limit)")
	fs.Float64Var(&o.rate, "rate", 100, "offered hits per second, all keys")
	fs.Float64Var(&o.load, "load", 0, "offered load as a multiple of limit per window, instead of -rate (default 10 with a bucket and no -rate)")
	fs.IntVar(&o.keys, "keys", 1, "distinct keys (1: one hot key)")
	fs.Float64Var(&o.zipf, "zipf", 1.1, "Zipf exponent over -keys (> 1), else uniform")
	fs.DurationVar(&o.duration, "duration", 12*time.Second, "how long each run offers load")
	fs.StringVar(&o.spread, "spread", "round-robin", "arrivals to nodes: round-robin, random, sticky or skewed (90% to one node, the rest evenly over the others)")
	fs.BoolVar(&o.poisson, "poisson", false, "Poisson arrivals instead of constant")
	sliding := fs.Bool("sliding", false, "same as -algorithm sliding_window (fixed windows make admitted per window exact to count)")
	fs.BoolVar(&o.nearLimit, "near-limit", false, "decide near-limit keys in the store (namespace NearLimit)")
	fs.Var(&o.leases, "leases", "lease the namespace (namespace Leases) at each -sync, which must be > 0; -leases=both: run each -sync > 0 both periodic and leased")
	fs.IntVar(&o.parallel, "parallel", 1, "runs made at once, each with its own nodes and namespace")
	fs.IntVar(&o.workers, "workers", 32, "concurrent callers per run")
	sweep := fs.Bool("sweep", false, "run the default grid: nodes 1,2,4,8 x sync 0,10ms,50ms,100ms,250ms,500ms,1s (without 0 for -near-limit and -leases)")
	fs.StringVar(&o.csv, "csv", "", "also write the rows to this CSV file")
	fs.StringVar(&o.svg, "svg", "", "write a chart against sync rate to this SVG file: over-admission, or with a bucket the long-run rate; with leased window runs, also the least admitted and the store calls")
	return gridFlags{nodes: nodes, syncs: syncs, algorithms: algorithms, precisions: precisions, sliding: sliding, sweep: sweep}
}

// grid sets the algorithms, node counts and sync rates to run, from the
// parsed flags (set: the flags given).
func (o *options) grid(f gridFlags, set map[string]bool) error {
	var err error
	if o.algorithms, err = parseList(*f.algorithms, "algorithm", parseAlgorithm); err != nil {
		return err
	}
	if *f.sliding {
		if set["algorithm"] && !slices.Equal(o.algorithms, []ratelimiting.Algorithm{ratelimiting.SlidingWindow}) {
			return errors.New("-sliding and -algorithm: give one")
		}
		o.algorithms = []ratelimiting.Algorithm{ratelimiting.SlidingWindow}
	}
	if *f.precisions != "" {
		if o.precisions, err = parseList(*f.precisions, "precision", time.ParseDuration); err != nil {
			return err
		}
	}
	if *f.sweep {
		o.nodes = sweepNodes
		for _, s := range sweepSyncs {
			if s > 0 || (!o.nearLimit && o.leases != leasesOn) { // near-limit and leases are periodic modes
				o.syncs = append(o.syncs, s)
			}
		}
		return nil
	}
	if o.nodes, err = parseList(*f.nodes, "nodes", strconv.Atoi); err != nil {
		return err
	}
	o.syncs, err = parseList(*f.syncs, "sync", time.ParseDuration)
	return err
}

// parseAlgorithm reads an algorithm as the node's configuration spells it,
// or fixed / sliding.
func parseAlgorithm(s string) (ratelimiting.Algorithm, error) {
	switch s {
	case "fixed":
		return ratelimiting.FixedWindow, nil
	case "sliding":
		return ratelimiting.SlidingWindow, nil
	}
	a, ok := ratelimiting.ParseAlgorithm(s)
	if !ok || a == ratelimiting.AnchoredWindow || a == ratelimiting.SlidingLog {
		return 0, errors.New("must be fixed_window, sliding_window, token_bucket or leaky_bucket")
	}
	return a, nil
}

// isBucket reports whether a is a bucket algorithm.
func isBucket(a ratelimiting.Algorithm) bool {
	return a == ratelimiting.TokenBucket || a == ratelimiting.LeakyBucket
}

// buckets reports whether a bucket is among the algorithms to run.
func (o *options) buckets() bool { return slices.ContainsFunc(o.algorithms, isBucket) }

// rates reports whether the rows report long-run rates (the second
// format): with a bucket among the algorithms, or with -precision.
func (o *options) rates() bool { return o.buckets() || o.precisions != nil }

// validate checks the options once parsed.
func (o *options) validate() error {
	switch {
	case o.store != "memory" && o.store != "redis" && o.store != "postgres":
		return fmt.Errorf("-store %q: must be memory, redis or postgres", o.store)
	case o.limit <= 0:
		return fmt.Errorf("-limit %v: must be > 0", o.limit)
	case o.window <= 0 || o.window%time.Millisecond != 0:
		return fmt.Errorf("-window %v: must be > 0 and whole milliseconds", o.window)
	case o.burst < 0 || (o.burst > 0 && !o.buckets()):
		return fmt.Errorf("-burst %v: must be >= 0, and only with a bucket -algorithm", o.burst)
	case o.rate <= 0 || o.load < 0:
		return fmt.Errorf("-rate %v, -load %v: -rate must be > 0, -load >= 0", o.rate, o.load)
	case o.parallel <= 0:
		return fmt.Errorf("-parallel %d: must be > 0", o.parallel)
	case o.keys <= 0:
		return fmt.Errorf("-keys %d: must be > 0", o.keys)
	case o.duration < o.window:
		return fmt.Errorf("-duration %v: must be at least -window %v (a whole window must be measured)", o.duration, o.window)
	}
	if err := o.validatePrecisions(); err != nil {
		return err
	}
	if o.spread != "skewed" {
		if _, err := integration.ParseSpread(o.spread); err != nil {
			return fmt.Errorf("-spread %q: must be round-robin, random, sticky or skewed", o.spread)
		}
	}
	if o.leases != leasesOff && o.nearLimit {
		return errors.New("-leases and -near-limit: give one (a leased namespace never over-admits)")
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
		if s == 0 && o.leases == leasesOn {
			return errors.New("-leases needs a periodic -sync (> 0): -sync 0 is synchronous (-leases=both runs it unleased beside the leased runs)")
		}
	}
	return nil
}

// validatePrecisions checks -precision against -window and -algorithm.
func (o *options) validatePrecisions() error {
	if o.precisions != nil && !slices.Contains(o.algorithms, ratelimiting.SlidingWindow) {
		return errors.New("-precision: only applies to sliding_window: add it to -algorithm")
	}
	for _, p := range o.precisions {
		switch {
		case p < 0 || p%time.Millisecond != 0:
			return fmt.Errorf("-precision %v: must be whole milliseconds >= 0 (0: Kong's two windows)", p)
		case p > 0 && o.window%p != 0:
			return fmt.Errorf("-precision %v: must divide -window %v", p, o.window)
		case p > 0 && o.window/p > ratelimiting.MaxPrecisionWindows:
			return fmt.Errorf("-precision %v: must be at least -window / %d (%v)", p, ratelimiting.MaxPrecisionWindows, o.window/ratelimiting.MaxPrecisionWindows)
		}
	}
	return nil
}

// leaseMode is -leases: whether the runs lease their namespace.
type leaseMode int

const (
	leasesOff  leaseMode = iota
	leasesOn             // every run leased
	leasesBoth           // each periodic run also leased
)

func (m *leaseMode) String() string {
	switch *m {
	case leasesOn:
		return "true"
	case leasesBoth:
		return "both"
	}
	return "false"
}

// Set reads true, false (as strconv.ParseBool spells them) or both.
func (m *leaseMode) Set(s string) error {
	if s == "both" {
		*m = leasesBoth
		return nil
	}
	on, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("must be true, false or both")
	}
	*m = leasesOff
	if on {
		*m = leasesOn
	}
	return nil
}

// IsBoolFlag lets -leases stand alone for -leases=true.
func (m *leaseMode) IsBoolFlag() bool { return true }

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
	fmt.Fprintln(stdout, o.header())
	for _, g := range o.groups() {
		got, err := measureGroup(ctx, o, st, g)
		if err != nil {
			return err
		}
		for _, r := range got {
			fmt.Fprintln(stdout, r.csv())
		}
		rows = append(rows, got...)
	}
	slices.SortStableFunc(rows, o.order)
	if o.csv != "" {
		if err := writeCSV(o.csv, o.header(), rows); err != nil {
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
