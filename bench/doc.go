// Package bench holds ratesync's end-to-end benchmarks against real Redis
// and PostgreSQL servers: the cost of a periodic sync as it follows a node's
// active keys, pushing 100,000 dirty keys in a few round trips, the
// coalescing of synchronous increments and checks, the node's Envoy rate
// limit service under gRPC load, and the node's HTTP paths under HTTP load
// against floors. Each benchmark measures its baseline in the same run and
// reports the ratio. Everything lives in the package's _test.go files (the
// rlsload, httpload and httpfloor commands aside); README.md gives the
// commands, and BENCHMARKS.md at the repository's root the figures
// measured with them. The package exports nothing.
package bench
