package postgres_test

import (
	"math/rand/v2"
	"net/url"
	"sync"

	"github.com/ratesync/ratesync/strategy/memory"
)

func newMemory() *memory.Store { return memory.New() }

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 42)) }

// exampleServer is the maintenance database ("postgres") of the server the
// tests of this binary used, for the examples, which run after the tests
// and cannot ask testenv for a database of their own.
var exampleServer struct {
	sync.Mutex
	url string
}

func rememberServer(dbURL string) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return
	}
	u.Path = "/postgres"
	exampleServer.Lock()
	defer exampleServer.Unlock()
	if exampleServer.url == "" {
		exampleServer.url = u.String()
	}
}
