package refmodel_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/ratesync/ratesync/internal/refmodel"
	"github.com/ratesync/ratesync/strategy/memory"
)

// TestGoldenIsCurrent checks that the checked-in table is what the model
// decides now: a change to the model that is not regenerated (go generate
// ./internal/refmodel) fails here.
func TestGoldenIsCurrent(t *testing.T) {
	want, err := refmodel.GenerateGolden().Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("testdata/golden.json is not what GenerateGolden makes now: run go generate ./internal/refmodel")
	}
}

// TestGoldenLocal runs the golden table through a local-only namespace:
// the node's own arithmetic.
func TestGoldenLocal(t *testing.T) { refmodel.RunGolden(t, nil) }

// TestGoldenMemory runs the golden suite on the memory store, the Go
// reference store.
func TestGoldenMemory(t *testing.T) {
	refmodel.RunGoldenSuite(t, func(*testing.T) refmodel.Store { return memory.New() })
}

// TestLeasedMemory runs the leased traces on the memory store.
func TestLeasedMemory(t *testing.T) { refmodel.RunLeased(t, memory.New(), 1) }
