package redis

import (
	"strconv"
	"strings"

	"github.com/ratesync/ratesync/strategy"
)

// Key layout. With tag = "{" + Prefix + ":" + escaped namespace + ":" + shard + "}":
//
//	tag + ":" + size ms + ":" + start ms   hash of one window's counters of the shard
//	tag + ":lane:" + node                  last Seq applied for node in the shard (20
//	                                       digits), then the decisions of its checks
//	                                       there ('1' or '0' each) when it was a check
//	tag + ":b:" + kind + ":" + window ms + ":" + key
//	                                       one bucket of a key of the shard (bucket.go)
//	tag + ":a:" + window ms + ":" + key    one anchored window: "at level"
//	tag + ":l:" + window ms + ":" + key    one sliding log's entries: sorted set, score
//	                                       and member "at:cost" per ms
//	tag + ":ls:" + window ms + ":" + key   the same log's "newest sum"
//	Prefix + ":layout"                     "v1 shards=N": the layout nodes agree on
//
// The namespace is escaped ('%', '{', '}' as %25, %7B, %7D) so that the tag
// ends at its own '}' and different namespaces never share a key. Keys of a
// counter (fields, and the end of a bucket's key) are stored as given, byte
// for byte: a key's braces come after the tag, which alone decides the
// Cluster slot.

// layoutVersion names the key layout and the scripts' data format.
const layoutVersion = "v1"

// shardOf returns the shard of key: FNV-1a 64 of its bytes modulo shards.
// The function is part of the stored layout: it never changes within a
// layoutVersion.
func shardOf(key string, shards int) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return int(h % uint64(shards))
}

// escapeNamespace makes a namespace safe inside a hash tag, injectively.
func escapeNamespace(ns string) string {
	if !strings.ContainsAny(ns, "%{}") {
		return ns
	}
	var b strings.Builder
	for i := 0; i < len(ns); i++ {
		switch c := ns[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// tag returns the hash tag of a namespace's shard: every key a script
// touches shares it, so one script stays in one Cluster slot.
func (s *Store) tag(ns string, shard int) string {
	return "{" + s.cfg.Prefix + ":" + escapeNamespace(ns) + ":" + strconv.Itoa(shard) + "}"
}

// windowKey returns the key of the hash of one window, in tag's shard.
func windowKey(tag string, sizeMs, startMs int64) string {
	b := make([]byte, 0, len(tag)+2+40)
	b = append(b, tag...)
	b = append(b, ':')
	b = strconv.AppendInt(b, sizeMs, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, startMs, 10)
	return string(b)
}

// setKeys sets g.tag and g.keys: node's lane record in g's shard, the hash
// of each window of g.wins, then each key of g.bkeys (see the layout
// above). The keys are those of laneKey, windowKey and bucketKey, and
// those of anchored windows and logs, built in one string.
func (s *Store) setKeys(g *group, node string) {
	var b strings.Builder
	b.Grow(s.keysLen(g, node))
	var endBuf [16]int
	ends := s.appendKeys(&b, endBuf[:0], g, node)
	all := b.String()
	g.keys = make([]string, len(ends))
	start := 0
	for i, end := range ends {
		g.keys[i] = all[start:end]
		start = end
	}
}

// keysLen returns about how many bytes the keys of g take.
func (s *Store) keysLen(g *group, node string) int {
	n := (1+len(g.wins)+len(g.bkeys))*(len(s.cfg.Prefix)+len(g.ns)+40) + len(node)
	for _, r := range g.bkeys {
		n += len(r.key)
	}
	return n
}

// appendKeys writes the keys of g (see setKeys) to b, appends the end of
// each in b to ends and returns ends, and sets g.tag.
func (s *Store) appendKeys(b *strings.Builder, ends []int, g *group, node string) []int {
	ns := escapeNamespace(g.ns)
	var num [20]byte
	start := b.Len()
	tag := func() {
		b.WriteByte('{')
		b.WriteString(s.cfg.Prefix)
		b.WriteByte(':')
		b.WriteString(ns)
		b.WriteByte(':')
		b.Write(strconv.AppendInt(num[:0], int64(g.shard), 10))
		b.WriteByte('}')
	}
	tag()
	tagEnd := b.Len()
	b.WriteString(":lane:")
	b.WriteString(node)
	ends = append(ends, b.Len())
	for _, w := range g.wins {
		tag()
		b.WriteByte(':')
		b.Write(strconv.AppendInt(num[:0], w.size, 10))
		b.WriteByte(':')
		b.Write(strconv.AppendInt(num[:0], w.start, 10))
		ends = append(ends, b.Len())
	}
	for _, r := range g.bkeys {
		tag()
		switch {
		case r.kind == strategy.KindAnchored:
			b.WriteString(":a:")
		case r.kind == strategy.KindLog && r.sum:
			b.WriteString(":ls:")
		case r.kind == strategy.KindLog:
			b.WriteString(":l:")
		default:
			b.WriteString(":b:")
			b.Write(strconv.AppendUint(num[:0], uint64(r.kind), 10))
			b.WriteByte(':')
		}
		b.Write(strconv.AppendInt(num[:0], r.window, 10))
		b.WriteByte(':')
		b.WriteString(r.key)
		ends = append(ends, b.Len())
	}
	g.tag = b.String()[start:tagEnd] // b's bytes so far; they do not move
	return ends
}

// laneKey returns the key of node's lane record in tag's shard.
func laneKey(tag, node string) string { return tag + ":lane:" + node }

// layoutKey returns the key recording the layout of the store's keys.
func (s *Store) layoutKey() string { return s.cfg.Prefix + ":layout" }

// layoutValue returns what the layout key holds for this configuration.
func (s *Store) layoutValue() string {
	return layoutVersion + " shards=" + strconv.Itoa(s.cfg.Shards)
}

// seqArg formats a Seq as 20 zero-padded decimal digits: the scripts
// compare it with a lane record as two 10-digit halves, each exact as a Lua
// number (a double), so every uint64 compares exactly, past 2^53 too.
func seqArg(seq uint64) string {
	var b [20]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + seq%10)
		seq /= 10
	}
	return string(b[:])
}
