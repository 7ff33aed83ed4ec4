package arith

// LogEntry is one entry of a sliding log: the cost admitted at one
// millisecond (hits of the same millisecond are merged).
type LogEntry struct {
	At   int64 // Unix milliseconds
	Cost float64
}

// Log is a sliding log: its entries, oldest first, one per millisecond,
// and Sum, the sum of their costs. The three steps below are the whole
// arithmetic; every store computes them in float64 in exactly this order,
// so that the node and each store decide every request the same way:
//
//	Trim(now, window): drop the entries with At <= now - window, oldest
//	                   first, subtracting each cost from Sum; Sum is 0 once
//	                   the log is empty.
//	LogFits:           Sum + cost <= limit.
//	Add(at, cost):     add cost to the entry at at (made in its place when
//	                   there is none) and to Sum.
//
// A hit at t weighs while now < t + window. With whole costs (or halves,
// quarters...) every step is exact.
type Log struct {
	Entries []LogEntry
	Sum     float64
	buf     []LogEntry // Entries' backing array, from its start
}

// LogFits reports whether a request of cost fits a log whose Sum, once
// trimmed, is sum.
func LogFits(sum, cost, limit float64) bool { return sum+cost <= limit }

// Trim drops the entries that no longer weigh at now.
func (l *Log) Trim(now, window int64) {
	n := 0
	for n < len(l.Entries) && l.Entries[n].At <= now-window {
		l.Sum -= l.Entries[n].Cost
		n++
	}
	if n == 0 {
		return
	}
	// Re-sliced, not copied: a trim costs what it drops. Add moves the
	// entries back to the start of the array when it reaches its end.
	l.Entries = l.Entries[n:]
	if len(l.Entries) == 0 {
		l.Entries, l.Sum = l.buf[:0], 0
	}
}

// Add counts cost at at.
func (l *Log) Add(at int64, cost float64) {
	i := len(l.Entries)
	for i > 0 && l.Entries[i-1].At > at {
		i--
	}
	l.Sum += cost
	if i > 0 && l.Entries[i-1].At == at {
		l.Entries[i-1].Cost += cost
		return
	}
	l.grow()
	l.Entries = append(l.Entries, LogEntry{})
	copy(l.Entries[i+1:], l.Entries[i:])
	l.Entries[i] = LogEntry{At: at, Cost: cost}
}

// grow makes room for one more entry without allocating while the array
// is at least twice as long as the entries: they move back to its start
// (each move follows as many trims as it copies entries, so it costs O(1)
// per hit); otherwise append grows a new array.
func (l *Log) grow() {
	n := len(l.Entries)
	if n < cap(l.Entries) {
		return
	}
	if n > 0 && cap(l.buf) >= 2*n && &l.buf[:1][0] != &l.Entries[0] {
		l.Entries = l.buf[:copy(l.buf[:n], l.Entries)]
		return
	}
	l.buf = make([]LogEntry, n, max(2*n, 4))
	copy(l.buf, l.Entries)
	l.Entries = l.buf
}

// Newest returns the instant of the newest entry, 0 when the log is empty.
func (l *Log) Newest() int64 {
	if len(l.Entries) == 0 {
		return 0
	}
	return l.Entries[len(l.Entries)-1].At
}

// RetryAt returns the first instant at which a request of cost fits the
// trimmed log, if no more hits come: the instant the oldest entries stop
// weighing, subtracted oldest first as Trim does, leave room for it. 0 when
// it fits now.
func RetryAt(entries []LogEntry, sum, cost, limit float64, window int64) int64 {
	if LogFits(sum, cost, limit) {
		return 0
	}
	for i, e := range entries {
		sum -= e.Cost
		if i == len(entries)-1 {
			sum = 0
		}
		if LogFits(sum, cost, limit) {
			return e.At + window
		}
	}
	return 0 // not reached: an empty log fits any cost up to the limit
}
