// Package bench holds ratesync's end-to-end benchmarks against real Redis
// and PostgreSQL servers: the cost of a periodic sync as it follows a node's
// active keys, pushing 100,000 dirty keys in a few round trips, the
// coalescing of synchronous increments and checks, and the node's Envoy rate
// limit service under gRPC load. Each benchmark measures its baseline in the
// same run and reports the ratio. Everything lives in the package's _test.go
// files (the rlsload command aside); README.md gives the commands, and
// BENCHMARKS.md at the repository's root the figures measured with them.
// The package exports nothing.
package bench
