package arith

// An anchored window opens at a key's first counted hit at instant at and
// holds count until at + window; then the key has no window until its next
// counted hit. A clock behind at still sees the window: it closes at
// at + window for every node.

// AnchoredCount returns the count at now of an anchored window that opened
// at at holding count: count while now < at + window, else 0.
func AnchoredCount(count float64, at, window, now int64) float64 {
	if !anchoredOpen(count, at, window, now) {
		return 0
	}
	return count
}

func anchoredOpen(count float64, at, window, now int64) bool { return count > 0 && now < at+window }

// AnchoredFits reports whether a request of cost fits an anchored window
// holding count: count + cost <= limit.
func AnchoredFits(count, cost, limit float64) bool { return count+cost <= limit }

// AnchoredAdd returns an anchored window (count, opened at at) once cost is
// counted at now: added to the open window, or opening one at now when none
// is open. A diff dated a whole window or more before the open window's
// opening belongs to a window that closed before it, and counts nowhere
// (the window is returned unchanged).
func AnchoredAdd(count float64, at int64, cost float64, window, now int64) (float64, int64) {
	if !anchoredOpen(count, at, window, now) {
		return cost, now
	}
	if now+window <= at {
		return count, at
	}
	return count + cost, at
}
