// Package syncer is part of the engine of ratesync: it moves a namespace's
// counters between a node's shm dict and a strategy, diffs out as batches
// and cluster totals back. Users go through package ratelimiting, which
// owns one Syncer per namespace that has a store; the exported API of this
// package serves ratelimiting and may change.
//
// A Syncer runs in one of three modes, chosen by the rate:
//
//   - periodic (rate > 0): a ticker, started after a random stagger so nodes
//     do not sync in lockstep, runs one sync at a time: take the dirty diffs,
//     push them as one Batch, then fetch the current and previous windows of
//     the keys this node holds;
//   - synchronous (rate == 0): every hit is pushed as it happens and the
//     store's totals come back in the same call; concurrent hits are
//     coalesced into one batch per store call. When the store fails, hits are
//     counted locally and pushed once it is back;
//   - never (rate < 0): the syncer does nothing (local-only namespaces have
//     none).
//
// A batch whose push failed stays in flight: it is retried, with the same
// (Node, Seq), before any newer diff, and the node's view keeps counting it
// (its amounts stay in the counters' sync part), so nothing dips or vanishes.
// Diffs for windows already older than the previous one when pushed are
// dropped and counted, never folded into a newer window.
//
// # Parts, one file each, with the state each owns
//
//   - syncer.go: the Syncer, its Config and the configuration snapshot
//     (conf), swapped whole by Reconfigure;
//   - lane.go: the push lane, the one exchange with the store at a time:
//     batches in flight, Seq numbering, acknowledgement, the in-flight
//     amount of each counter;
//   - fetch.go: reading the store's totals into the node's view;
//   - buckets.go: buckets' pending cost as bucket diffs, and the store's
//     buckets read back into the node's view;
//   - health.go: the store's down state and back-off;
//   - periodic.go: the periodic loop (ticker, sync, purge) and the
//     ownership of the background goroutine;
//   - coalescer.go: the synchronous queue of hits and checks, and its
//     worker;
//   - check.go: checks decided in the store (strategy.Checker), from the
//     worker or, in periodic mode, for near-limit keys;
//   - stats.go: Stats and Report, written in one place;
//   - clock.go: the one source of time;
//   - offset.go: the node's offset from the store's clock (strategy.Clock),
//     its estimate and the namespace clock it adjusts.
//
// # Locks
//
// Locks are taken in this order, never the other way round:
//
//	loop.mu -> lane.mu -> confMu
//
// and queue.mu, stats.mu and offset.mu are leaves, taken with any of those
// held or none, and never held while taking another lock.
//
// loop.mu guards starting and stopping the background goroutine; halt holds
// it while waiting for that goroutine, which may wait for lane.mu. lane.mu
// is held for a whole exchange with the store, I/O included: every wait for
// it is bounded by a context (laneLock.lockCtx), and halt cancels the
// background goroutine's. halt cancels a periodic sync under way, and a
// recovery push of the synchronous worker (bounded by Timeout), whose
// batches stay in flight; but it waits for the store calls that answer the
// worker's hits and checks, which run within HitTimeout under a context
// halt does not cancel (see turn). Cancellation,
// by halt or by a caller, never marks the store down. confMu serializes
// changes of the configuration snapshot, which everyone else reads with one
// atomic load. Reconfigure, Stats, Start and the callers of Hit never take
// lane.mu; Check, Sync, Fetch and Stop take it within their context (and
// Check within HitTimeout), so a hung store delays them at most by their
// bound.
//
// # Time
//
// Every time the syncer reads comes from its Config: Now (the node's clock,
// Unix milliseconds) adjusted by the store's offset for window arithmetic
// and LastFetch (the namespace clock, Syncer.Now), and Clock (the node's,
// full resolution) for the back-off and down state, the purge schedule,
// Stats' times, and the durations of exchanges (Report.Duration, and the
// RTT averaged from them). Timers only wait: every decision compares
// against the clock, so a fake Clock drives the back-off, the down state
// and the times readiness checks read.
//
// The store's clock. When the strategy tells time (strategy.Clock), the
// syncer measures the node's offset from it: offset = the store's time
// minus Clock halfway through the call. It measures when its background
// work starts (before the first sync or hit), in each sync (periodic mode;
// in an idle sync that call is also the probe that tells whether the store
// answers), and in synchronous mode between the worker's turns, at most
// once a second while calls flow and at once after the store was down. The
// estimate is the offset of the sample with the shortest round trip among
// the last 8, so that one slow reply does not move it; a sample that cannot
// agree with it within their round trips (a clock was stepped, the store
// failed over to another server) replaces the older ones. With
// Config.StoreClock the namespace clock is Now plus the estimate, whole
// milliseconds, read with one atomic load. Before the first measurement
// (and when the store does not tell time) the offset is 0. A change of the
// estimate never moves the namespace clock back by up to 100 ms: it holds
// still until Now catches up, so no hit goes back to a window this node
// has left; a change back by more (the first measurement of a clock far
// ahead) steps at once. Offsets beyond clockOffsetWarn are logged, once
// each way; Stats carry the estimate.
//
// The syncer knows shm and strategy, nothing of limits or configuration
// files.
package syncer
