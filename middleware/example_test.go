package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratesync/ratesync/middleware"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
)

// A service limits each API key to 2 requests per second and 100 per
// minute, answering 429 with the rate-limit headers beyond that.
func Example() {
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // a fixed clock for the example
	in := ratelimiting.NewInstance("service", ratelimiting.WithClock(func() time.Time { return clock }))
	defer in.Close(context.Background())
	err := in.New(namespace.Config{Name: "api", SyncRate: namespace.LocalOnly, WindowSizes: []time.Duration{time.Second, time.Minute}})
	if err != nil {
		panic(err)
	}
	key, err := middleware.ParseKey([]string{"header:X-Api-Key"}, middleware.KeyOptions{})
	if err != nil {
		panic(err)
	}
	lim, err := middleware.New(in, middleware.Policy{
		Name:      "api",
		Namespace: "api",
		Limits: []ratelimiting.Limit{
			{Limit: 2, Window: time.Second, Fixed: true},
			{Limit: 100, Window: time.Minute},
		},
		Key: key,
	}, middleware.Options{})
	if err != nil {
		panic(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	h := lim.Handler(hello) // or: mux.Handle("/api/", lim.Handler(apiHandler))

	for i := range 3 {
		r := httptest.NewRequest("GET", "/api/hello", nil)
		r.Header.Set("X-Api-Key", "k-123")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %d remaining=%s retry-after=%q %s", i+1, w.Code, w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("Retry-After"), w.Body)
	}
	// Output:
	// 1 200 remaining=1 retry-after="" hello
	// 2 200 remaining=0 retry-after="" hello
	// 3 429 remaining=0 retry-after="1" {"message":"API rate limit exceeded"}
}
