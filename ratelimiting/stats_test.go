package ratelimiting_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy/memory"
)

// The observer sees every exchange with the store, as a SyncReport; nil
// means no observer. Stats gives each namespace's dict and sync state.
func TestSyncObserverAndStats(t *testing.T) {
	ctx := context.Background()
	var (
		mu      sync.Mutex
		reports []ratelimiting.SyncReport
	)
	observe := func(r ratelimiting.SyncReport) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, r)
	}
	tests := []struct {
		name     string
		observer func(ratelimiting.SyncReport)
		want     bool // reports expected
	}{
		{"an observer", observe, true},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			reports = nil
			mu.Unlock()
			in := newInstance(t, newClock(t0), ratelimiting.WithSyncObserver(tt.observer))
			mustNew(t, in, synced("p", time.Hour, memory.New(), time.Minute))
			incr(t, in, "p", "k", time.Minute, 3)
			if err := in.Sync(ctx, "p"); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			got := append([]ratelimiting.SyncReport(nil), reports...)
			mu.Unlock()
			if !tt.want {
				if len(got) != 0 {
					t.Fatalf("reports %+v without an observer", got)
				}
				return
			}
			pushed := 0
			for _, r := range got {
				if r.Namespace != "p" || r.Err != nil {
					t.Errorf("report %+v, want namespace p without error", r)
				}
				pushed += r.Pushed
			}
			if pushed != 1 {
				t.Errorf("reports %+v pushed %d diffs, want 1", got, pushed)
			}
			st := in.Stats()
			if len(st) != 1 || st[0].Dict.Entries != 1 || st[0].Sync.Pushes == 0 || !st[0].Sync.StoreUp {
				t.Errorf("Stats = %+v, want one namespace, one entry, a push acknowledged, the store up", st)
			}
		})
	}
}
