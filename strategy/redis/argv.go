package redis

// argv is the ARGV of a script call running one group, laid out as
// lane.lua, push.lua and check.lua read it: seq, the lane record TTL, then
// the group's arguments preceded by their number. It is the one code that
// writes that layout: push and CheckAndCount build their groups' ARGV with
// its methods only, each method appending what one line of a script's
// header comment describes, and join puts groups in one call.
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

// ttls appends the TTL of each window hash of the group, in ms.
func (a *argv) ttls(ttls []int64) {
	for i := range ttls {
		*a = append(*a, &ttls[i])
	}
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
// diffs, the hashes' TTLs.
func (a *argv) pushGroup(mode string, nkeys, nbuckets int, ttls []int64) {
	*a = append(*a, mode, len(ttls), nkeys, nbuckets)
	a.ttls(ttls)
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
	n := argvHead + 4 + m + 6*nb
	for _, r := range runs {
		n += 3 + 2*len(r.idx)
	}
	return n
}

// Check groups (check.lua): checkGroup, then each check (check) followed
// by its window limits (limit), then its keyed limits (keyedLimit).

// checkGroup appends the head of a check group: its number of window
// hashes m (len(ttls)), its number of keys, whether its checks name
// distinct fields and have one plain window limit each and no keyed limit
// (simple: the script skips its value cache), the hashes' TTLs.
func (a *argv) checkGroup(nkeys int, simple bool, ttls []int64) {
	if simple {
		*a = append(*a, len(ttls), nkeys, "1")
	} else {
		*a = append(*a, len(ttls), nkeys, "0")
	}
	a.ttls(ttls)
}

// check appends the head of a check: its field, its cost, its number of
// window limits and its number of keyed limits.
func (a *argv) check(field, cost *string, nlimits, nbuckets int) {
	*a = append(*a, field, cost, nlimits, nbuckets)
}

// limit appends a window limit of a check: the number of windows it
// reads, their hash numbers (the current window first, then the ones
// before it: the previous one, or the sub-windows of a precision limit),
// their size (ms), the ms elapsed in the current window (nil: a fixed
// window), the limit.
func (a *argv) limit(hashes []int, size, elapsed *int64, limit *string) {
	var e any = "F"
	if elapsed != nil {
		e = elapsed
	}
	*a = append(*a, len(hashes))
	for _, h := range hashes {
		*a = append(*a, h)
	}
	*a = append(*a, size, e, limit)
}

// keyedLimit appends a limit of a check on a bucket, anchored window or
// log: its type (keyedType), its key number h, the check's clock (ms), the
// window (ms), the limit (a bucket's rate) and a bucket's burst ("" for
// the others).
func (a *argv) keyedLimit(typ string, h int, now, window *int64, limit *string, burst any) {
	*a = append(*a, typ, h, now, window, limit, burst)
}

// checkArgs returns the size of the ARGV of a check group of m window
// hashes and n checks of one plain window limit each (more limits, or
// deeper ones, grow it).
func checkArgs(m, n int) int { return argvHead + 3 + m + 10*n }

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
