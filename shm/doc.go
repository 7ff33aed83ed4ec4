// Package shm is part of the engine of ratesync: the node-local counter
// store, the Go counterpart of the nginx shared memory zone ("shm") Kong's
// rate-limiting library counts in. Users go through package ratelimiting;
// the exported API of this package serves ratelimiting and syncer and may
// change. Some of it is for the syncer only (Series.Take, Window.TakeKey,
// Window.AddTaken, Window.SetSynced, Series.SetPinned): it moves amounts
// between a counter's two parts, and an amount taken that no one pushes is
// lost to the cluster.
//
// A Dict is a named, bounded set of counters. Inside a dict, counters are
// grouped by Series (one namespace and one window size) and by Window (one
// window start of that series); each Window keeps its counters in hash
// tables of its own (table.go), eight by the hash of the key, whose slots
// point at the counters: a Counter holds its key, so a counter costs its 32
// bytes, its key's and a slot, and nothing more while it waits for the
// syncer. Lookups take no lock; making and removing counters lock one of the
// eight tables. A Counter holds two float64 values changed with atomic
// compare-and-swap on their bits:
//
//   - diff: hits taken on this node and not yet handed to the syncer;
//   - sync: the cluster total as last read from the store, plus what the
//     syncer took from diff and has not yet seen in a store read.
//
// The value of a counter on this node is sync + diff, and every value read
// is one the counter held at one instant. An increment of an existing
// counter allocates nothing and takes no lock: it only waits, for two
// atomic operations, when it meets the syncer moving that very counter's
// diff into sync. The first increment
// that makes a zero diff non-zero lists the counter in its series' dirty
// list (one pointer, in a run of its window), so the syncer finds the
// counters it has to push without scanning the dict.
//
// Expiry: a window expires once it can no longer affect any rate, that is
// when it is older than the previous window of its size, and is dropped whole
// once no listed diff of it is waiting for the syncer. Time is the caller's:
// namespaces of one dict may count on different clocks, and the sweep reads
// each at its own (Dict.SetClock).
//
// Capacity: a dict holds at most Capacity counters. Above 90% of it a
// background sweep (one goroutine at a time, which Dict.Close stops and
// waits for) drops expired windows and then evicts cold counters
// (lowest counts, previous windows first) that hold no unpushed diff, down to
// 80%. When the dict is full of counters it may not evict, a new counter is
// not created: the hit is answered as if the key had no history, and is
// counted in Stats.Overflows (Kong's shm fails open the same way). Eviction
// marks a counter dead before deleting it, and an increment that meets a dead
// counter looks it up again, so no concurrent increment is lost.
//
// Buckets (bucket.go): a dict also holds token and leaky buckets, one table
// per namespace, kind and window, made on first use. A bucket is one float64
// word changed by compare-and-swap (GCRA's theoretical arrival time, scaled
// by the bucket's rate), plus, in namespaces that sync, the cost taken and
// not yet pushed. Buckets count toward the dict's capacity; an empty bucket
// holds no information and is expired by the sweep.
//
// shm knows nothing of stores, namespaces' configuration or limits: it is
// the data structure the syncer and the ratelimiting package share.
package shm
