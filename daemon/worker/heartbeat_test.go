package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/clock"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// flakyRenewer fails its first renewals, then succeeds, recording when
// each call arrived.
type flakyRenewer struct {
	mu    sync.Mutex
	fails int
	calls []time.Time
}

func (r *flakyRenewer) Renew(context.Context, uuid.UUID, int64, time.Duration) (store.RenewResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, time.Now())
	if len(r.calls) <= r.fails {
		return store.RenewResult{}, errors.New("connection refused")
	}
	return store.RenewResult{OK: true}, nil
}

func (r *flakyRenewer) times() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.calls...)
}

// TestAFailedRenewalIsRetriedWellBeforeTheNextInterval: the heartbeat
// renews every Lease/3, but a renewal that fails (the database is away) is
// tried again within Lease/15, so a lease is renewed soon after the
// database answers again rather than a third of a lease later. The retry
// waits are drawn with full jitter, so one short gap proves little (a
// retry at the interval, drawn from [0, 1 s], is under the bound 30 % of
// the time): eight failures in a row must each be retried within the
// bound (a retry at the interval passes that 0.3^8 of the time, where two
// let the mutant survive one run in eleven).
func TestAFailedRenewalIsRetriedWellBeforeTheNextInterval(t *testing.T) {
	const lease = 3 * time.Second // interval 1 s, retries within 200 ms
	const fails = 8
	r := &flakyRenewer{fails: fails}
	w := &Worker{
		cfg: Config{Renewer: r, Lease: lease, Metrics: metrics.New(), Clock: clock.OrSystem(nil)},
		log: slog.New(slog.DiscardHandler),
	}
	hb := w.heartbeat(store.ClaimedTask{ID: uuid.New(), FencingToken: 1}, func(error) {}, w.log)
	defer hb.stop()
	deadline := time.Now().Add(10 * time.Second)
	for len(r.times()) < fails+1 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d renewals in 10 s", len(r.times()))
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not a wait for state
	}
	calls := r.times()
	for i := 1; i <= fails; i++ {
		if gap := calls[i].Sub(calls[i-1]); gap > lease/15+100*time.Millisecond {
			t.Errorf("renewal %d came %v after the failed one; want within Lease/15 = %v", i+1, gap, lease/15)
		}
	}
}
