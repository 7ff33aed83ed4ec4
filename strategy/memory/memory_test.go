package memory_test

import (
	"testing"

	"github.com/ratesync/ratesync/internal/strategytest"
	"github.com/ratesync/ratesync/strategy"
	"github.com/ratesync/ratesync/strategy/memory"
)

func TestContract(t *testing.T) {
	strategytest.Run(t, func(t *testing.T) strategy.Strategy { return memory.New() })
}

func TestFaultyWrapperPassesTheContract(t *testing.T) {
	strategytest.Run(t, func(t *testing.T) strategy.Strategy { return strategytest.NewFaulty(memory.New()) })
}
