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

// TestGoldenMemory runs the golden table through a synchronous namespace on
// the memory store, which decides every request with a cost.
func TestGoldenMemory(t *testing.T) { refmodel.RunGolden(t, memory.New()) }

// TestGoldenMemoryTogether runs the golden table on the memory store on
// eight keys at once, several checks to a call.
func TestGoldenMemoryTogether(t *testing.T) { refmodel.RunGoldenTogether(t, memory.New(), 8) }

// TestGoldenMemoryCalls runs the golden table through the memory store's
// CheckAndCount, the steps of one instant in one call.
func TestGoldenMemoryCalls(t *testing.T) { refmodel.RunGoldenCalls(t, memory.New()) }

// TestGoldenMemoryPeriodic runs the golden table's cases of windows and
// buckets through a periodic namespace on the memory store, synced after
// each step.
func TestGoldenMemoryPeriodic(t *testing.T) { refmodel.RunGoldenPeriodic(t, memory.New()) }
