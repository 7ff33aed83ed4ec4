package redis

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/strategy"
)

// Buckets. A bucket is one string key in the shard of its counter key
// (bucketKey), so the scripts change it with the windows and the lane
// record of the same shard, in one Cluster slot. It holds
//
//	"<at> <level> <rate>"    e.g. "2208988800334 2998 3"
//
// at in Unix ms, level as '%.17g' writes it (which parses back to the very
// double: arith.BucketAdd's arithmetic stays exact from call to call),
// rate as the node sent it. One string with a TTL is about the smallest a
// Redis key gets: 120 bytes for a bucket of the key "user:42" (MEMORY
// USAGE on Redis 7.0, key name included; its TTL adds an entry to the
// expires table), where a hash of the same three fields takes some 16
// bytes more, and two commands to write. The TTL ends a minute
// after the bucket drains empty (at + level / rate, rounded up), counted
// from the clock of the request that last changed it: an expired bucket is
// an empty one, so Purge has nothing to do for buckets either.

// bucketRef is a key of a bucket, anchored window or log of a group's
// namespace: the bucket or anchored window itself, or one of a log's two
// keys (sum false: its entries; true: its sum).
type bucketRef struct {
	key    string
	kind   uint8
	window int64 // ms
	sum    bool
}

// bucketUse is a bucket diff of a push group: its position in the batch
// and its bucket number in the group.
type bucketUse struct{ item, b int }

// bucket returns the number of r among g's buckets (1-based: g.bkeys[b-1]),
// adding it. Its key number in the group's call is len(g.wins) + b, once
// g.wins is complete.
func (g *group) bucket(r bucketRef) int {
	if g.bindex == nil {
		for i, x := range g.bkeys {
			if x == r {
				return i + 1
			}
		}
		if len(g.bkeys) < linearMax {
			g.bkeys = append(g.bkeys, r)
			return len(g.bkeys)
		}
		g.bindex = make(map[bucketRef]int, 2*len(g.bkeys))
		for i, x := range g.bkeys {
			g.bindex[x] = i + 1
		}
	}
	if b, ok := g.bindex[r]; ok {
		return b
	}
	g.bkeys = append(g.bkeys, r)
	g.bindex[r] = len(g.bkeys)
	return len(g.bkeys)
}

// keyed returns the number of the key of the bucket, anchored window or log
// (key, kind, window) among g's buckets (see bucket), adding it. A log has
// two keys, added together: its entries, whose number keyed returns, and
// its sum, the next number.
func (g *group) keyed(key string, kind uint8, window int64) int {
	b := g.bucket(bucketRef{key, kind, window, false})
	if kind == strategy.KindLog {
		g.bucket(bucketRef{key, kind, window, true})
	}
	return b
}

// keyedType returns how the scripts name a kind of keyed state: "a" for an
// anchored window, "l" for a log, "b" for a bucket (every other kind).
func keyedType(kind uint8) string {
	switch kind {
	case strategy.KindAnchored:
		return "a"
	case strategy.KindLog:
		return "l"
	}
	return "b"
}

// isBucket reports whether a limit or diff of kind (not 0) is a bucket.
func isBucket(kind uint8) bool { return kind != strategy.KindAnchored && kind != strategy.KindLog }

// bucketKey returns the key of a bucket in tag's shard: the counter key
// last, as given, so that kind, window and key read back unambiguously.
func bucketKey(tag string, kind uint8, windowMs int64, key string) string {
	b := make([]byte, 0, len(tag)+3+3+1+20+1+len(key))
	b = append(b, tag...)
	b = append(b, ":b:"...)
	b = strconv.AppendUint(b, uint64(kind), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, windowMs, 10)
	b = append(b, ':')
	b = append(b, key...)
	return string(b)
}

// validBuckets checks the bucket diffs of b.
func validBuckets(b strategy.Batch) error {
	for i, d := range b.Buckets {
		if d.Kind != 0 && d.Window > 0 && d.Window%time.Millisecond == 0 && d.CostValid() && positive(d.Rate) {
			continue
		}
		what := fmt.Sprintf("batch %d of node %q: bucket diff %d (key %s)", b.Seq, b.Node, i, quote(d.Key))
		switch {
		case d.Kind == 0:
			return fmt.Errorf("redis: %s: Kind = 0: must be a bucket kind, 1 to 255", what)
		case !d.CostValid():
			return fmt.Errorf("redis: %s: Cost = %v: must be finite and not 0 (> 0 for an anchored window or a log)", what, d.Cost)
		case !positive(d.Rate):
			return fmt.Errorf("redis: %s: Rate = %v: must be finite and > 0", what, d.Rate)
		}
		return checkSize(what, d.Window)
	}
	return nil
}

// positive reports whether v is finite and above 0.
func positive(v float64) bool { return v > 0 && !math.IsInf(v, 1) }

// parseBucket parses a bucket key's value.
func parseBucket(v string) (at int64, level float64, err error) {
	f := strings.Fields(v)
	if len(f) == 3 {
		if at, err = strconv.ParseInt(f[0], 10, 64); err == nil {
			if level, err = strconv.ParseFloat(f[1], 64); err == nil {
				return at, level, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("bucket %q: want \"at level rate\"", v)
}

// parseBucketReply parses a bucket, anchored window or log as check.lua
// returns it: at (an integer) and level (a string), or two empty strings
// for a key that holds none.
func parseBucketReply(at, level any) (int64, float64, error) {
	a, err := parseMs(at)
	if err != nil {
		return 0, 0, err
	}
	l, err := parseCount(level)
	return a, l, err
}

// parseMs parses an instant as check.lua returns it: an integer (Unix
// ms), or an empty string for none (0).
func parseMs(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case string:
		if v == "" {
			return 0, nil
		}
		return 0, fmt.Errorf("instant %q: want an integer", v)
	}
	return 0, fmt.Errorf("instant of type %T: want an integer", v)
}

// GetBuckets returns the buckets of refs that the store holds, in the
// order of refs: one MGET per namespace shard of the refs (at most
// Config.FieldsPerCommand keys each), all pipelined in one round trip.
// Buckets that drained and expired are empty, and left out; so are
// anchored windows and logs (refs of KindAnchored and KindLog), which
// only CheckAndCount reads.
func (s *Store) GetBuckets(ctx context.Context, namespace string, refs []strategy.BucketRef) ([]strategy.BucketState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i, r := range refs {
		what := fmt.Sprintf("buckets of namespace %q: ref %d (key %s)", namespace, i, quote(r.Key))
		if r.Kind == 0 {
			return nil, fmt.Errorf("redis: %s: Kind = 0: must be a bucket kind, 1 to 255", what)
		}
		if err := checkSize(what, r.Window); err != nil {
			return nil, err
		}
	}
	if !slices.ContainsFunc(refs, func(r strategy.BucketRef) bool { return isBucket(r.Kind) }) {
		return nil, nil
	}
	reads := s.bucketReads(namespace, refs)
	op := func() string { return fmt.Sprintf("get %d buckets of namespace %q", len(refs), namespace) }
	var cmds []*goredis.SliceCmd
	err := s.call(ctx, op, func(ctx context.Context) error {
		pipe := s.c.Pipeline()
		cs := make([]*goredis.SliceCmd, len(reads))
		for i, r := range reads {
			cs[i] = pipe.MGet(ctx, r.keys...)
		}
		_, _ = pipe.Exec(ctx) // errors are read per command below
		cmds = cs
		return nil
	})
	if err != nil {
		return nil, err
	}
	return bucketStates(refs, reads, cmds, op)
}

// bucketRead is one MGET of GetBuckets: keys of one shard, and the
// position in refs of each.
type bucketRead struct {
	keys []string
	refs []int
}

// bucketReads groups the keys of refs by shard, in reads of at most
// Config.FieldsPerCommand keys.
func (s *Store) bucketReads(ns string, refs []strategy.BucketRef) []*bucketRead {
	var reads []*bucketRead
	open := make(map[int]*bucketRead) // the read of each shard still filling
	for i, r := range refs {
		if !isBucket(r.Kind) {
			continue // anchored windows and logs are not returned
		}
		sh := shardOf(r.Key, s.cfg.Shards)
		rd := open[sh]
		if rd == nil || len(rd.keys) == s.cfg.FieldsPerCommand {
			rd = &bucketRead{}
			open[sh] = rd
			reads = append(reads, rd)
		}
		rd.keys = append(rd.keys, bucketKey(s.tag(ns, sh), r.Kind, r.Window.Milliseconds(), r.Key))
		rd.refs = append(rd.refs, i)
	}
	return reads
}

// bucketStates parses the replies of reads into the states of refs the
// store holds, in the order of refs.
func bucketStates(refs []strategy.BucketRef, reads []*bucketRead, cmds []*goredis.SliceCmd, op func() string) ([]strategy.BucketState, error) {
	held := make([]*strategy.BucketState, len(refs))
	n := 0
	for k, rd := range reads {
		vals, err := cmds[k].Result()
		if err == nil && len(vals) != len(rd.keys) {
			err = fmt.Errorf("%d values for %d keys", len(vals), len(rd.keys))
		}
		if err != nil {
			return nil, fmt.Errorf("redis: %s: MGET %s...: %w", op(), rd.keys[0], err)
		}
		for j, v := range vals {
			if v == nil {
				continue
			}
			str, _ := v.(string)
			at, level, err := parseBucket(str)
			if err != nil {
				return nil, fmt.Errorf("redis: %s: key %s: %w", op(), rd.keys[j], err)
			}
			r := refs[rd.refs[j]]
			held[rd.refs[j]] = &strategy.BucketState{Key: r.Key, Kind: r.Kind, Window: r.Window, At: at, Level: level}
			n++
		}
	}
	out := make([]strategy.BucketState, 0, n)
	for _, b := range held {
		if b != nil {
			out = append(out, *b)
		}
	}
	return out, nil
}
