package redis

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/ratesync/ratesync/internal/arith"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/strategy"
)

// GetCounters yields the counters of q.Namespace in the current and the
// previous window of each size of q.WindowSizes as of q.Now, and in the
// windows before those down to q.Depth of the size (the sub-windows of a
// precision limit): the deepest asked for a size listed twice.
//
// With q.Keys (the syncer's case) it reads only those keys: HMGETs of at
// most Config.FieldsPerCommand fields, all pipelined in one round trip. With
// q.Keys nil it reads every hash of those windows: one round trip of HLENs,
// then HGETALL for hashes of up to Config.ScanThreshold fields and HSCAN
// pages (COUNT FieldsPerCommand) for bigger ones, pipelined, so that no
// command blocks Redis for long. Counters are yielded as each round's
// replies are parsed; when yield returns false, no further command is sent.
// Duplicate keys and sizes in q are read once.
func (s *Store) GetCounters(ctx context.Context, q strategy.Query) iter.Seq2[strategy.Counter, error] {
	return func(yield func(strategy.Counter, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(strategy.Counter{}, err)
			return
		}
		sizes := make([]sizeDepth, 0, len(q.WindowSizes))
		for i, size := range q.WindowSizes {
			if err := checkSize(fmt.Sprintf("query of namespace %q", q.Namespace), size); err != nil {
				yield(strategy.Counter{}, err)
				return
			}
			sizes = addSize(sizes, size, q.Depth(i))
		}
		var err error
		if q.Keys != nil {
			err = s.getKeys(ctx, q, sizes, yield)
		} else {
			err = s.getAll(ctx, q, sizes, yield)
		}
		if err != nil {
			yield(strategy.Counter{}, err)
		}
	}
}

// sizeDepth is a window size of a query and how many of its windows to
// read, newest first.
type sizeDepth struct {
	size  time.Duration
	depth int
}

// addSize adds size, read depth windows deep, to sizes: once, as deep as
// asked for the deepest.
func addSize(sizes []sizeDepth, size time.Duration, depth int) []sizeDepth {
	for i := range sizes {
		if sizes[i].size == size {
			sizes[i].depth = max(sizes[i].depth, depth)
			return sizes
		}
	}
	return append(sizes, sizeDepth{size, depth})
}

// errStop ends a read whose consumer stopped iterating.
var errStop = errors.New("redis: iteration stopped")

// windows calls fn for the window of each size holding now and the ones
// before it, newest first, down to the size's depth.
func windows(sizes []sizeDepth, now time.Time, fn func(size time.Duration, start time.Time)) {
	for _, sd := range sizes {
		cur := arith.WindowStart(now, sd.size)
		for back := range sd.depth {
			fn(sd.size, cur.Add(-time.Duration(back)*sd.size))
		}
	}
}

// getKeys reads q.Keys with pipelined HMGETs.
func (s *Store) getKeys(ctx context.Context, q strategy.Query, sizes []sizeDepth, yield func(strategy.Counter, error) bool) error {
	type shardKeys struct {
		tag  string
		keys []string
	}
	var shards []*shardKeys
	byShard := make(map[int]*shardKeys)
	seen := make(map[string]struct{}, len(q.Keys))
	for _, k := range q.Keys {
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		sh := shardOf(k, s.cfg.Shards)
		sk := byShard[sh]
		if sk == nil {
			sk = &shardKeys{tag: s.tag(q.Namespace, sh)}
			byShard[sh] = sk
			shards = append(shards, sk)
		}
		sk.keys = append(sk.keys, k)
	}
	if len(shards) == 0 {
		return nil
	}
	type read struct {
		size   time.Duration
		start  time.Time
		fields []string
	}
	var reads []*read
	windows(sizes, q.Now, func(size time.Duration, start time.Time) {
		for _, sk := range shards {
			for lo := 0; lo < len(sk.keys); lo += s.cfg.FieldsPerCommand {
				hi := min(lo+s.cfg.FieldsPerCommand, len(sk.keys))
				reads = append(reads, &read{size: size, start: start, fields: sk.keys[lo:hi]})
			}
		}
	})
	keyOf := func(r *read) string {
		return windowKey(s.tag(q.Namespace, shardOf(r.fields[0], s.cfg.Shards)), r.size.Milliseconds(), r.start.UnixMilli())
	}
	op := fmt.Sprintf("get %d keys of namespace %q", len(seen), q.Namespace)
	var cmds []*goredis.SliceCmd
	err := s.call(ctx, func() string { return op }, func(ctx context.Context) error {
		pipe := s.c.Pipeline()
		cs := make([]*goredis.SliceCmd, len(reads))
		for i, r := range reads {
			cs[i] = pipe.HMGet(ctx, keyOf(r), r.fields...)
		}
		_, _ = pipe.Exec(ctx) // errors are read per command below
		cmds = cs
		return nil
	})
	if err != nil {
		return err
	}
	for i, r := range reads {
		vals, err := cmds[i].Result()
		if err != nil {
			return fmt.Errorf("redis: %s: HMGET %s: %w", op, keyOf(r), err)
		}
		if len(vals) != len(r.fields) {
			return fmt.Errorf("redis: %s: HMGET %s: %d values for %d fields", op, keyOf(r), len(vals), len(r.fields))
		}
		for j, v := range vals {
			if v == nil {
				continue
			}
			n, err := parseCount(v)
			if err != nil {
				return fmt.Errorf("redis: %s: key %s: %w", op, quote(r.fields[j]), err)
			}
			if !yield(strategy.Counter{Key: r.fields[j], WindowStart: r.start, WindowSize: r.size, Count: n}, nil) {
				return nil
			}
		}
	}
	return nil
}

// getAll reads every counter of the windows: HLEN, then HGETALL or HSCAN.
func (s *Store) getAll(ctx context.Context, q strategy.Query, sizes []sizeDepth, yield func(strategy.Counter, error) bool) error {
	var hashes []*hashRead
	windows(sizes, q.Now, func(size time.Duration, start time.Time) {
		for sh := range s.cfg.Shards {
			hashes = append(hashes, &hashRead{key: windowKey(s.tag(q.Namespace, sh), size.Milliseconds(), start.UnixMilli()), size: size, start: start})
		}
	})
	op := fmt.Sprintf("get namespace %q", q.Namespace)

	// Round 1: the size of each hash.
	todo, err := s.hashLengths(ctx, op, hashes)
	if err != nil {
		return err
	}
	// Next rounds: small hashes whole, big ones a page at a time, until
	// every cursor is back to 0.
	for len(todo) > 0 {
		if err := s.readHashes(ctx, op, todo); err != nil {
			return err
		}
		next := todo[:0]
		for _, h := range todo {
			more, err := h.yieldReply(op, yield)
			if err != nil {
				return stopped(err)
			}
			if more {
				next = append(next, h)
			}
		}
		todo = next
	}
	return nil
}

// hashRead is one window hash of a whole-namespace read.
type hashRead struct {
	key    string
	size   time.Duration
	start  time.Time
	n      int64
	cursor uint64
	seen   map[string]struct{} // fields yielded, for a hash read by HSCAN (which may repeat one)
	all    *goredis.MapStringStringCmd
	scan   *goredis.ScanCmd
}

// hashLengths reads the number of fields of each hash (HLEN, pipelined)
// and returns the hashes that have some.
func (s *Store) hashLengths(ctx context.Context, op string, hashes []*hashRead) ([]*hashRead, error) {
	var lens []*goredis.IntCmd
	err := s.call(ctx, func() string { return op }, func(ctx context.Context) error {
		pipe := s.c.Pipeline()
		cs := make([]*goredis.IntCmd, len(hashes))
		for i, h := range hashes {
			cs[i] = pipe.HLen(ctx, h.key)
		}
		_, _ = pipe.Exec(ctx)
		lens = cs
		return nil
	})
	if err != nil {
		return nil, err
	}
	var todo []*hashRead
	for i, h := range hashes {
		n, err := lens[i].Result()
		if err != nil {
			return nil, fmt.Errorf("redis: %s: HLEN %s: %w", op, h.key, err)
		}
		if h.n = n; n > 0 {
			todo = append(todo, h)
		}
	}
	return todo, nil
}

// readHashes reads each hash of todo, pipelined: a hash of up to
// ScanThreshold fields whole (HGETALL), a bigger one by its next page
// (HSCAN).
func (s *Store) readHashes(ctx context.Context, op string, todo []*hashRead) error {
	return s.call(ctx, func() string { return op }, func(ctx context.Context) error {
		pipe := s.c.Pipeline()
		for _, h := range todo {
			if h.n <= int64(s.cfg.ScanThreshold) {
				h.all = pipe.HGetAll(ctx, h.key)
			} else {
				h.scan = pipe.HScan(ctx, h.key, h.cursor, "", int64(s.cfg.FieldsPerCommand))
			}
		}
		_, _ = pipe.Exec(ctx)
		return nil
	})
}

// yieldReply yields the counters of h's reply to readHashes, and reports
// whether h has more pages to read. It returns errStop when the consumer
// stopped.
func (h *hashRead) yieldReply(op string, yield func(strategy.Counter, error) bool) (more bool, err error) {
	if h.all != nil {
		m, err := h.all.Result()
		if err != nil {
			return false, fmt.Errorf("redis: %s: HGETALL %s: %w", op, h.key, err)
		}
		for f, v := range m {
			if err := h.emit(op, f, v, yield); err != nil {
				return false, err
			}
		}
		return false, nil
	}
	page, cursor, err := h.scan.Result()
	if err != nil {
		return false, fmt.Errorf("redis: %s: HSCAN %s: %w", op, h.key, err)
	}
	if h.seen == nil {
		h.seen = make(map[string]struct{}, h.n)
	}
	for i := 0; i+1 < len(page); i += 2 {
		if err := h.emit(op, page[i], page[i+1], yield); err != nil {
			return false, err
		}
	}
	h.cursor = cursor
	return cursor != 0, nil
}

// emit yields one counter of h, once.
func (h *hashRead) emit(op, field, value string, yield func(strategy.Counter, error) bool) error {
	if h.seen != nil {
		if _, dup := h.seen[field]; dup {
			return nil
		}
		h.seen[field] = struct{}{}
	}
	n, err := parseCount(value)
	if err != nil {
		return fmt.Errorf("redis: %s: %s: key %s: %w", op, h.key, quote(field), err)
	}
	if !yield(strategy.Counter{Key: field, WindowStart: h.start, WindowSize: h.size, Count: n}, nil) {
		return errStop
	}
	return nil
}

// stopped turns the end of iteration into no error.
func stopped(err error) error {
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// GetWindow returns one counter's count (HGET), 0 when the store does not
// hold it.
func (s *Store) GetWindow(ctx context.Context, namespace, key string, windowStart time.Time, windowSize time.Duration) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := checkSize(fmt.Sprintf("window of key %s", quote(key)), windowSize); err != nil {
		return 0, err
	}
	hkey := windowKey(s.tag(namespace, shardOf(key, s.cfg.Shards)), windowSize.Milliseconds(), windowStart.UnixMilli())
	op := func() string { return fmt.Sprintf("get key %s of %s", quote(key), hkey) }
	var n float64
	err := s.call(ctx, op, func(ctx context.Context) error {
		v, err := s.c.HGet(ctx, hkey, key).Result()
		if errors.Is(err, goredis.Nil) {
			return nil
		}
		if err != nil {
			return err
		}
		c, err := parseCount(v)
		if err != nil {
			return err
		}
		n = c
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Purge does nothing but check its arguments: every window hash expires
// Config.TTLMargin after it stops being read, every bucket a minute after
// it drains empty, every anchored window a minute after it closes, every
// log a minute after its newest entry stops weighing, and every lane
// record Config.LaneTTL after its last use, by Redis TTL (see the package
// doc), so there is nothing left for it to remove.
func (s *Store) Purge(ctx context.Context, namespace string, windowSizes []time.Duration, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, size := range windowSizes {
		if err := checkSize(fmt.Sprintf("purge of namespace %q", namespace), size); err != nil {
			return err
		}
	}
	return nil
}
