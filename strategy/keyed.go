package strategy

// Anchored windows and sliding logs. Like a bucket, each is identified by
// (namespace, key, kind, window) and kept by a BucketStore, which decides
// it in CheckAndCount and applies its diffs (BucketDiff, from a node that
// decided on its own while the store was down) in PushDiffs; GetBuckets
// need not return them (no periodic namespace uses them). A CheckResult
// gives its state as a BucketState:
//
//	anchored window: At is the instant the window opened (Unix ms), Level
//	                 the count in it; zero when the key has no window.
//	sliding log:     At is the newest entry's instant, Level the sum of the
//	                 entries that weigh (the log's Sum), and, for a denied
//	                 check, RetryAt the instant at which the same request
//	                 fits (internal/arith's RetryAt); zero when no entry weighs.
const (
	KindAnchored uint8 = 2 // a fixed window that opens at a key's first counted hit
	KindLog      uint8 = 3 // a sliding log: each hit weighs for exactly the window
)
