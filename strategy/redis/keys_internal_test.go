package redis

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/strategy"
)

func TestSeqArg(t *testing.T) {
	for _, c := range []struct {
		name string
		seq  uint64
		want string
	}{
		{"zero", 0, "00000000000000000000"},
		{"one", 1, "00000000000000000001"},
		{"2^53", 1 << 53, "00000000009007199254740992"[6:]},
		{"2^53+1", 1<<53 + 1, "00000009007199254740993"[3:]},
		{"max", math.MaxUint64, "18446744073709551615"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := seqArg(c.seq); got != c.want || len(got) != 20 {
				t.Fatalf("seqArg(%d) = %q, want %q", c.seq, got, c.want)
			}
		})
	}
}

func TestEscapeNamespaceIsInjectiveAndBraceFree(t *testing.T) {
	names := []string{"", "a", "a}", "{a", "{a}", "a%7D", "a%", "%", "%25", "a:1", "a:1:2", "}{", "%7B%7D"}
	seen := make(map[string]string)
	for _, n := range names {
		e := escapeNamespace(n)
		if strings.ContainsAny(e, "{}") {
			t.Errorf("escapeNamespace(%q) = %q: contains a brace", n, e)
		}
		if other, dup := seen[e]; dup {
			t.Errorf("escapeNamespace(%q) = escapeNamespace(%q) = %q", n, other, e)
		}
		seen[e] = n
	}
}

// The shard function is part of the stored layout: these values must never
// change within layout v1.
func TestShardOfIsStable(t *testing.T) {
	for _, c := range []struct {
		key    string
		shards int
		want   int
	}{
		{"", 16, 5}, {"a", 16, 12}, {"user:42", 16, 2}, {"nul\x00byte", 16, 10}, {"user:42", 1, 0}, {"user:42", 1024, 450},
	} {
		if got := shardOf(c.key, c.shards); got != c.want {
			t.Errorf("shardOf(%q, %d) = %d, want %d", c.key, c.shards, got, c.want)
		}
	}
}

func TestKeyLayout(t *testing.T) {
	s := &Store{cfg: Config{Prefix: "rs", Shards: 16}}
	tag := s.tag("a{p}i", 3)
	if want := "{rs:a%7Bp%7Di:3}"; tag != want {
		t.Fatalf("tag = %q, want %q", tag, want)
	}
	if got, want := windowKey(tag, 60000, -120000), tag+":60000:-120000"; got != want {
		t.Errorf("windowKey = %q, want %q", got, want)
	}
	if got, want := laneKey(tag, "api|node/1"), tag+":lane:api|node/1"; got != want {
		t.Errorf("laneKey = %q, want %q", got, want)
	}
}

// The keys of a group, built in one string, are those of laneKey,
// windowKey and bucketKey, and all hash in Redis Cluster by the group's
// tag: a counter key's braces come after it.
func TestGroupKeys(t *testing.T) {
	s := &Store{cfg: Config{Prefix: "rs", Shards: 1024}}
	g := &group{ns: "a{p}i", shard: 1000, wins: []window{{60000, -120000}, {1000, 1700000000000}}}
	g.keyed("{user}:42", 4, 1000)
	g.keyed("}{", 255, 60000)
	if a := g.keyed("a", strategy.KindAnchored, 1000); a != 3 {
		t.Fatalf("anchored window: number %d, want 3", a)
	}
	if l := g.keyed("{user}:42", strategy.KindLog, 1000); l != 4 {
		t.Fatalf("log: number %d, want 4 (its sum 5)", l)
	}
	if l := g.keyed("{user}:42", strategy.KindLog, 1000); l != 4 || len(g.bkeys) != 5 {
		t.Fatalf("the same log again: number %d and %d keys, want 4 and 5", l, len(g.bkeys))
	}
	s.setKeys(g, "api|node/1")
	tag := s.tag(g.ns, g.shard)
	want := []string{laneKey(tag, "api|node/1"), windowKey(tag, 60000, -120000), windowKey(tag, 1000, 1700000000000),
		bucketKey(tag, 4, 1000, "{user}:42"), bucketKey(tag, 255, 60000, "}{"), keyedKey(tag, strategy.KindAnchored, 1000, "a", false),
		keyedKey(tag, strategy.KindLog, 1000, "{user}:42", false), keyedKey(tag, strategy.KindLog, 1000, "{user}:42", true)}
	if g.tag != tag || !slices.Equal(g.keys, want) {
		t.Errorf("tag %q, keys %q; want %q, %q", g.tag, g.keys, tag, want)
	}
	for i, w := range map[int]string{3: ":b:4:1000:{user}:42", 5: ":a:1000:a", 6: ":l:1000:{user}:42", 7: ":ls:1000:{user}:42"} {
		if got := want[i]; got != tag+w {
			t.Errorf("key %d = %q, want %q", i, got, tag+w)
		}
	}
	for _, k := range g.keys {
		if got, want := hashedPart(k), tag[1:len(tag)-1]; got != want {
			t.Errorf("key %q hashes by %q in Redis Cluster, want %q (the group's tag)", k, got, want)
		}
	}
}

// keyedKey returns the key of an anchored window (kind KindAnchored), or
// of a log's entries or, with sum, its sum (KindLog), in tag's shard, as
// the layout (keys.go) writes them.
func keyedKey(tag string, kind uint8, windowMs int64, key string, sum bool) string {
	part := ":a:"
	if kind == strategy.KindLog {
		part = ":l:"
		if sum {
			part = ":ls:"
		}
	}
	return tag + part + strconv.FormatInt(windowMs, 10) + ":" + key
}

// hashedPart returns the part of key Redis Cluster hashes to find its slot:
// the text between its first '{' and the first '}' after it, when not
// empty; else the whole key.
func hashedPart(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// Calls run on the caller's goroutine only with clients that bound
// commands by their context.
func TestWatchesContext(t *testing.T) {
	for _, c := range []struct {
		name   string
		client goredis.UniversalClient
		want   bool
	}{
		{"default client", goredis.NewClient(&goredis.Options{}), false},
		{"client", goredis.NewClient(&goredis.Options{ContextTimeoutEnabled: true}), true},
		{"client without timeouts", goredis.NewClient(&goredis.Options{ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1}), true},
		{"client without deadlines", goredis.NewClient(&goredis.Options{ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
		{"failover client", goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: "m", ContextTimeoutEnabled: true}), true},
		{"default cluster client", goredis.NewClusterClient(&goredis.ClusterOptions{}), false},
		{"cluster client", goredis.NewClusterClient(&goredis.ClusterOptions{ContextTimeoutEnabled: true}), true},
		{"cluster client without deadlines", goredis.NewClusterClient(&goredis.ClusterOptions{ContextTimeoutEnabled: true, WriteTimeout: -2}), false},
		{"ring", goredis.NewRing(&goredis.RingOptions{ContextTimeoutEnabled: true}), true},
		{"ring without deadlines", goredis.NewRing(&goredis.RingOptions{ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
		{"other client", wrapped{goredis.NewClient(&goredis.Options{ContextTimeoutEnabled: true})}, false},
	} {
		if got := watchesContext(c.client); got != c.want {
			t.Errorf("%s: watchesContext = %v, want %v", c.name, got, c.want)
		}
		_ = c.client.Close()
	}
}

type wrapped struct{ goredis.UniversalClient }

func TestWindowTTL(t *testing.T) {
	s := &Store{cfg: Config{TTLMargin: 5 * time.Second}}
	for _, c := range []struct {
		name                       string
		start, size, span, now, ms int64
	}{
		{"start of the window", 60000, 60000, 60000, 60000, 125000},
		{"end of its life as previous", 60000, 60000, 60000, 180000, 5000},
		{"long gone: the margin", 60000, 60000, 60000, 10_000_000, 5000},
		{"a span below the size is the size", 60000, 60000, 0, 60000, 125000},
		{"a sub-window of a 1h span", 60000, 60000, 3600000, 60000, 3665000},
		{"read until its span slides past it", 60000, 1000, 60000, 121000, 5000},
	} {
		if got := s.windowTTL(c.start, c.size, c.span, c.now); got != c.ms {
			t.Errorf("%s: windowTTL = %d, want %d", c.name, got, c.ms)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	got, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Prefix: "ratesync", Shards: 16, TTLMargin: 5 * time.Second, LaneTTL: 24 * time.Hour, Timeout: 5 * time.Second, ScanThreshold: 1000, FieldsPerCommand: 1000}
	if got != want {
		t.Fatalf("defaults = %+v, want %+v", got, want)
	}
}
