package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/strategy"
)

// Three nodes on one store, node 2's clock 1.5 s ahead of the others', all
// hitting one key in the middle of a 1 s window of the others' (true)
// clock. With the store's clock (the default) every hit lands in that
// window: the store holds nothing in the window after it, which the others
// have not reached. With the node's clock (Clock: NodeClock) node 2's hits
// land one or two windows ahead. On Redis and PostgreSQL, periodic and
// synchronous.
func TestStoreClockKeepsASkewedNodeInTheClustersWindow(t *testing.T) {
	const (
		window = time.Second
		skew   = 1500 * time.Millisecond
		hits   = 5 // per node
	)
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			store := st.open(t)
			for _, mode := range []struct {
				name string
				rate time.Duration
			}{{"periodic", 100 * time.Millisecond}, {"synchronous", namespace.Synchronous}} {
				for _, clock := range []namespace.Clock{namespace.StoreClock, namespace.NodeClock} {
					t.Run(fmt.Sprintf("%s/%s clock", mode.name, clock), func(t *testing.T) {
						c := newCluster(t, ClusterConfig{
							Nodes: 3, Namespace: fmt.Sprintf("clock-%s-%s", mode.name, clock), SyncRate: mode.rate,
							Strategy: store, WindowSizes: []time.Duration{window}, Skew: []time.Duration{0, 0, skew}, Clock: clock,
						})
						offsets := measuredOffsets(t, c)
						if d := offsets[2] - offsets[0]; d < -skew-100*time.Millisecond || d > -skew+100*time.Millisecond {
							t.Fatalf("measured offsets %v: node 2's is %v from node 0's, want -1.5s ± 100ms", offsets, d)
						}
						key, start := hitMidWindow(t, c, window, hits)
						if mode.rate > 0 {
							if err := c.Sync(context.Background()); err != nil { // push
								t.Fatal(err)
							}
						}
						counts := map[time.Duration]float64{}
						for _, back := range []time.Duration{-window, 0, window, 2 * window, 3 * window} {
							counts[back] = storedCount(t, store, c.Namespace(), key, start.Add(back), window)
						}
						t.Logf("store's counts by window, from the others' current one (0): %v", counts)
						total := counts[-window] + counts[0] + counts[window] + counts[2*window] + counts[3*window]
						if total != 3*hits {
							t.Fatalf("the store holds %v hits in all, want %d", total, 3*hits)
						}
						ahead := counts[window] + counts[2*window] + counts[3*window]
						switch clock {
						case namespace.StoreClock:
							if ahead != 0 || counts[0] != 3*hits {
								t.Fatalf("store clock: %v hits in windows the others have not reached, %v in theirs; want 0 and %d", ahead, counts[0], 3*hits)
							}
						case namespace.NodeClock:
							if ahead != hits || counts[0] != 2*hits {
								t.Fatalf("node clock: %v hits in windows ahead, %v in the others'; want node 2's %d ahead", ahead, counts[0], hits)
							}
						}
					})
				}
			}
		})
	}
}

// measuredOffsets waits until every node has measured its offset from the
// store's clock, and returns them.
func measuredOffsets(t *testing.T, c *Cluster) []time.Duration {
	t.Helper()
	offsets := make([]time.Duration, len(c.Nodes))
	eventually(t, 10*time.Second, "every node measured the store's clock", func() bool {
		for i, in := range c.Nodes {
			for _, st := range in.Stats() {
				if !st.Sync.ClockMeasured {
					return false
				}
				offsets[i] = st.Sync.ClockOffset
			}
		}
		return true
	})
	return offsets
}

// hitMidWindow makes every node count hits on one key between 100 ms and
// 900 ms into a window of the true clock (the others'), and returns the key
// and that window's start. A round the machine delayed past 900 ms is left
// as it is, and the next one, on another key, goes into a later window.
func hitMidWindow(t *testing.T, c *Cluster, window time.Duration, hits int) (string, time.Time) {
	t.Helper()
	ctx := context.Background()
	for round := range 10 {
		key := fmt.Sprintf("k%d", round)
		start := nextBoundary(window)
		time.Sleep(time.Until(start.Add(100 * time.Millisecond)))
		for range hits {
			for _, in := range c.Nodes {
				if _, err := in.Increment(ctx, c.Namespace(), key, window, 1); err != nil {
					t.Fatal(err)
				}
			}
		}
		if time.Since(start) < window-100*time.Millisecond {
			return key, start
		}
		t.Logf("round %d took past 900 ms into its window: another round", round)
	}
	t.Fatal("no round of hits fit in the middle of a window in 10 tries")
	return "", time.Time{}
}

// storedCount returns the store's count of key in the window of size that
// starts at start.
func storedCount(t *testing.T, s strategy.Strategy, ns, key string, start time.Time, size time.Duration) float64 {
	t.Helper()
	v, err := s.GetWindow(context.Background(), ns, key, start, size)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
