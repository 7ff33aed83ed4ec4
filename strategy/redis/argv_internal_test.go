package redis

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratesync/ratesync/strategy"
)

// show writes an ARGV as the server gets it: pointers written as their
// values, strings quoted.
func show(args []any) string {
	parts := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case *string:
			a = *v
		case *int64:
			a = *v
		}
		if s, ok := a.(string); ok {
			parts[i] = fmt.Sprintf("%q", s)
		} else {
			parts[i] = fmt.Sprint(a)
		}
	}
	return strings.Join(parts, " ")
}

// The ARGV of each kind of group, as push.lua and check.lua read it (see
// their header comments). A change here is a change of the wire format:
// the scripts must change with it.
func TestArgvLayout(t *testing.T) {
	cfg, err := Config{Shards: 1}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{cfg: cfg, laneTTL: cfg.LaneTTL.Milliseconds()}
	old := time.UnixMilli(0).UTC() // push: windows long gone, so every TTL is the margin, 5000
	diffs := []strategy.Diff{
		{Namespace: "ns", Key: "a", WindowStart: old.Add(60 * time.Second), WindowSize: time.Minute, Value: 1},
		{Namespace: "ns", Key: "b", WindowStart: old, WindowSize: time.Second, Value: 0.5},
		{Namespace: "ns", Key: "a", WindowStart: old.Add(60 * time.Second), WindowSize: time.Minute, Value: 2},
	}
	fields, values := diffStrings(diffs)
	seq := any(seqArg(7))
	for _, c := range []struct {
		count bool
		want  string
	}{
		// mode, m, k, TTLs, then runs by hash: h, n, n (field, value).
		{false, `"00000000000000000007" 86400000 15 "0" 2 3 5000 5000 1 2 "a" "1" "a" "2" 2 1 "b" "0.5"`},
		// mode ("1": field a repeats), m, k (the lane, 2 hashes, their 2
		// previous windows), TTLs, then runs in batch order: h, previous
		// window's h, n, n (field, value).
		{true, `"00000000000000000007" 86400000 20 "1" 2 5 5000 5000 1 3 1 "a" "1" 2 4 1 "b" "0.5" 1 3 1 "a" "2"`},
	} {
		gs := s.groups(diffs, c.count)
		if len(gs) != 1 {
			t.Fatalf("%d groups, want 1", len(gs))
		}
		s.encodePush(gs[0], "n", seq, fields, values, c.count, time.Now().UnixMilli())
		if got := show(gs[0].args); got != c.want {
			t.Errorf("push, count %v:\n got  %s\n want %s", c.count, got, c.want)
		}
	}

	now := old.Add(90 * time.Second) // 30 s into the minute window; TTLs to 2 windows after each start, plus the margin
	checks := []strategy.Check{
		{Namespace: "ns", Key: "a", Cost: 1, Now: now, Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 10}, {WindowSize: time.Second, Limit: 2, Fixed: true}}},
		{Namespace: "ns", Key: "b", Cost: 0.5, Now: now, Limits: []strategy.CheckLimit{{WindowSize: time.Minute, Limit: 10}}},
	}
	strs := newCheckStrings(checks, 3)
	gr := grouper{shards: 1}
	for i, c := range checks {
		g := gr.of(c.Namespace, c.Key)
		g.items = append(g.items, i)
	}
	lims := s.checkHashes(gr.gs, checks, 3)
	s.encodeCheck(gr.gs[0], "n", seq, checks, lims, &strs)
	// m, simple ("0": a check of two limits), TTLs, then each check: field,
	// cost, L, then L limits: h, previous window's h, size, elapsed or "F",
	// limit.
	want := `"00000000000000000007" 86400000 27 4 "0" 95000 35000 7000 6000 ` +
		`"a" "1" 2 1 2 60000 30000 "10" 3 4 1000 "F" "2" ` +
		`"b" "0.5" 1 1 2 60000 30000 "10"`
	if got := show(gr.gs[0].args); got != want {
		t.Errorf("check:\n got  %s\n want %s", got, want)
	}
}
