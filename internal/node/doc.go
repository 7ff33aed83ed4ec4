// Package node is the ratesync node: a ratelimiting.Instance configured by
// a config.Config, served over an HTTP JSON API (/v1/check, /v1/increment,
// /v1/window, admin endpoints), with health (/healthz, /readyz) and
// Prometheus metrics (/metrics), optionally a rate-limiting reverse proxy
// (gateway mode) and Envoy's rate limit service (gRPC, and POST /json on
// the API). Run serves until its context is done, reloads the
// configuration on SIGHUP and when its files change, then drains requests
// and makes a final sync of every namespace.
//
// It owns the process's servers, the stores' clients, its log and its
// reloads. It does not read flags, files or the environment (the config
// package does) and holds no counting rule of its own: counting, syncing
// and the stores are the library's, headers and key selection the
// middleware's, Envoy's rules the rls package's.
//
// Files: run.go (Run, logging), node.go (the Node and its servers), api.go,
// check.go, checkfast.go, jsonbody.go, request.go, problem.go and auth.go
// (the JSON API), gateway.go, rls.go, health.go, metrics.go, clientlog.go
// (the store clients' logs), stores.go (opening stores), reload.go.
package node
