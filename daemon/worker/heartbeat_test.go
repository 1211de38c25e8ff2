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

// silentRenewer never answers: each Renew waits for its context to end
// (or for quit, closed when the test ends), as a renewal sent into a
// black-holed network does, recording when each call arrived.
type silentRenewer struct {
	flakyRenewer
	quit chan struct{}
}

func (r *silentRenewer) Renew(ctx context.Context, _ uuid.UUID, _ int64, _ time.Duration) (store.RenewResult, error) {
	r.mu.Lock()
	r.calls = append(r.calls, time.Now())
	r.mu.Unlock()
	select {
	case <-ctx.Done():
		return store.RenewResult{}, ctx.Err()
	case <-r.quit:
		return store.RenewResult{}, errors.New("test over")
	}
}

// TestARenewalThatGetsNoAnswerGivesUpAfterItsInterval: mode 135. A
// renewal the database never answers (a partition drops its packets: no
// error comes back, TCP retransmits for minutes) is given up after a
// renewal interval (Lease/3) and retried, so the worker notices the
// partition ("heartbeat failed") within two intervals of its last
// renewal, and renews as soon as a path is back, instead of waiting on
// one dead connection for as long as TCP does.
func TestARenewalThatGetsNoAnswerGivesUpAfterItsInterval(t *testing.T) {
	const lease = 1500 * time.Millisecond // interval 500 ms, retries within 100 ms
	r := &silentRenewer{quit: make(chan struct{})}
	w := &Worker{
		cfg: Config{Renewer: r, Lease: lease, Metrics: metrics.New(), Clock: clock.OrSystem(nil)},
		log: slog.New(slog.DiscardHandler),
	}
	start := time.Now()
	hb := w.heartbeat(store.ClaimedTask{ID: uuid.New(), FencingToken: 1}, func(error) {}, w.log)
	defer func() {
		close(r.quit) // a renewal still waiting returns, so the heartbeat can stop
		hb.stop()
	}()
	deadline := start.Add(5 * time.Second)
	for len(r.times()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals in 5 s: a renewal that gets no answer is never given up", len(r.times()))
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not a wait for state
	}
	calls := r.times()
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].Sub(calls[i-1]); gap > lease/3+lease/15+500*time.Millisecond {
			t.Errorf("renewal %d came %v after the unanswered one; want its interval (%v) plus a retry wait (at most %v)", i+1, gap, lease/3, lease/15)
		}
	}
}
