// Package middleware limits HTTP requests with a ratelimiting.Instance: a
// func(http.Handler) http.Handler that Go services put in front of their
// handlers, as users of ulule/limiter or sethvargo/go-limiter do, and that
// the ratesync node's gateway mode puts in front of a reverse proxy.
//
// A Limiter enforces one Policy: a namespace of the instance, the limits a
// request is checked against (all or nothing), a key selector that names
// the client (KeyFunc, ParseKey), the cost of a request, Kong's penalty
// behaviour, and what to do while the namespace's store is unreachable. A
// limit counts with any of ratelimiting's algorithms: a sliding window
// counter (with Precision sub-windows or without), a fixed window, an
// anchored window, a sliding log, a token bucket or a leaky bucket. An
// allowed request reaches the next handler with the rate-limit headers set;
// a denied one gets 429, a JSON body {"message": "API rate limit exceeded"}
// and the same headers plus Retry-After.
//
// The package also owns the rate-limit response headers (WriteHeaders), so
// that the node's /v1/check endpoint writes exactly what the middleware
// writes:
//
//   - RateLimit-Policy and RateLimit, in the syntax of
//     draft-ietf-httpapi-ratelimit-headers-11: one item per limit, named
//     "<policy>/<window>" ("<policy>/<window>/fixed" for fixed windows,
//     "/anchored" and "/sliding_log" for anchored windows and sliding logs,
//     "/token_bucket" and "/leaky_bucket" for buckets, whose q is the
//     capacity and w the seconds an empty bucket takes to fill);
//   - X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset for the
//     most constrained limit (lowest remaining; on a tie the larger window),
//     as Kong's RateLimit-* headers describe it;
//   - Retry-After on a denial, in whole seconds rounded up, never 0.
//
// middleware decides nothing itself: the counting and the decision are the
// ratelimiting package's; this package maps requests to keys and decisions
// to responses.
package middleware
