package redis

// argv is the ARGV of a script call running one push group, laid out as
// lane.lua and push.lua read it: seq, the lane record TTL, then the
// group's arguments preceded by their number. It is the one code that
// writes that layout: push builds its groups' ARGV with its methods only,
// each method appending what one line of push.lua's header comment
// describes, and join puts groups in one call. (CheckAndCount's calls are
// laid out by checkCall, for check.lua.)
//
// Strings, TTLs and other big numbers go by pointer (*string, *int64: see
// numArgs), which go-redis writes without boxing each; they point into
// slices of the call being encoded, never into the caller's values (the
// exchange may outlive the call: see call). Small numbers go as ints. The
// zero value is no ARGV: use newArgv.
type argv []any

// argvHead is the number of arguments before a group's own: seq, lane TTL
// and the group's argument count.
const argvHead = 3

// newArgv starts the ARGV of a group with seq and the lane TTL, each boxed
// once by the caller, with room for size arguments in all.
func newArgv(seq, laneTTL any, size int) argv {
	a := make(argv, argvHead, size)
	a[0], a[1] = seq, laneTTL
	return a
}

// done sets the group's argument count and returns a.
func (a argv) done() argv {
	a[2] = len(a) - argvHead
	return a
}

// numArgs holds numbers of a call's arguments, which go by pointer: ints
// as *int64, floats formatted as the scripts parse them, as *string. They
// live in slices of the call, never in the caller's values.
type numArgs struct {
	ints []int64
	strs []string
}

// intArg returns a pointer to v, held by a.
func (a *numArgs) intArg(v int64) *int64 {
	a.ints = append(a.ints, v)
	return &a.ints[len(a.ints)-1]
}

// floatArg returns a pointer to v formatted as the scripts parse it, held
// by a.
func (a *numArgs) floatArg(v float64) *string {
	a.strs = append(a.strs, formatFloat(v))
	return &a.strs[len(a.strs)-1]
}

// newNumArgs returns a numArgs with room for n ints and n strings. (Were
// one to grow, the pointers already out would keep the old array, whose
// values do not change.)
func newNumArgs(n int) *numArgs {
	return &numArgs{ints: make([]int64, 0, n), strs: make([]string, 0, n)}
}

// Push groups (push.lua): pushGroup, its keyed diffs (keyedDiff), then
// each run (pushRun or countRun) followed by its diffs (diff).

// Modes of a push group.
const (
	pushOnly      = "0" // no totals
	countAny      = "1" // totals; fields may repeat
	countDistinct = "2" // totals; distinct fields, so the script skips its value cache
)

// pushGroup appends the head of a push group: its mode, its number of
// window hashes m (len(ttls)), its number of keys, its number of keyed
// diffs, then each hash's TTL (ms) and "1" when a diff reads it over a
// span longer than its size (spans, parallel to ttls or shorter: see
// group.spans), else "0".
func (a *argv) pushGroup(mode string, nkeys, nbuckets int, ttls, spans []int64) {
	*a = append(*a, mode, len(ttls), nkeys, nbuckets)
	for i := range ttls {
		flag := "0"
		if i < len(spans) && spans[i] > 0 {
			flag = "1"
		}
		*a = append(*a, &ttls[i], flag)
	}
}

// keyedDiff appends a diff of a bucket, anchored window or log: its type
// (keyedType), its key number h, the diff's at (ms), cost, the window (ms)
// and rate (the limit).
func (a *argv) keyedDiff(typ string, h int, at *int64, cost *string, window *int64, rate *string) {
	*a = append(*a, typ, h, at, cost, window, rate)
}

// pushRun appends the head of a run of n diffs into hash h (push mode).
func (a *argv) pushRun(h, n int) { *a = append(*a, h, n) }

// countRun appends the head of a run of n diffs into hash h whose previous
// window is hash prev (count modes).
func (a *argv) countRun(h, prev, n int) { *a = append(*a, h, prev, n) }

// diff appends one diff of a run: its field and value.
func (a *argv) diff(field, value *string) { *a = append(*a, field, value) }

// pushArgs returns the size of the ARGV of a push group of m window
// hashes, nb keyed diffs and the given runs, at most.
func pushArgs(m, nb int, runs []run) int {
	n := argvHead + 4 + 2*m + 6*nb
	for _, r := range runs {
		n += 3 + 2*len(r.idx)
	}
	return n
}

// Calls of several groups.

// joined returns an ARGV with a's seq and lane TTL, and room for size
// arguments, to which join appends groups.
func (a argv) joined(size int) argv {
	j := make(argv, 2, size)
	copy(j, a[:2])
	return j
}

// join appends the group of b (its argument count and arguments) to a, an
// ARGV from joined: the scripts run the groups of ARGV in turn.
func (a argv) join(b argv) argv { return append(a, b[2:]...) }
