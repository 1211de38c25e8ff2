package scheduler

import (
	"context"
	"database/sql"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// withLockTimeout has the rig's scheduler use a store of its own whose
// sessions give up a lock wait after d (as --db-lock-timeout does in
// production, 15 s by default).
func withLockTimeout(t *testing.T, d time.Duration) func(*Config) {
	return func(c *Config) {
		st, err := store.Open(context.Background(), c.DatabaseURL, store.Options{MaxConns: 10, LockTimeout: d})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		c.Store = st
	}
}

// holdRun begins a transaction that locks the run's row, as a forgotten
// BEGIN; SELECT ... FOR UPDATE in psql does; it is rolled back in cleanup
// unless the test let it go first.
func (r *passRig) holdRun(run uuid.UUID) *sql.Tx {
	r.t.Helper()
	h, err := r.db.BeginTx(context.Background(), nil)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = h.Rollback() })
	if _, err := h.Exec(`SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE`, run); err != nil {
		r.t.Fatal(err)
	}
	return h
}

// awaitHeld waits until a targeted pass of the scheduler handed run back
// as held (its test signal), failing the test after 10 s.
func (r *passRig) awaitHeld(run uuid.UUID) {
	r.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ids := <-r.s.signals.held:
			if slices.Contains(ids, run) {
				return
			}
		case <-deadline:
			r.t.Fatalf("no targeted pass handed run %s back as held", run)
		}
	}
}

// trigger starts a run of chain.
func (r *passRig) trigger() uuid.UUID {
	r.t.Helper()
	return storetest.Trigger(r.t, r.st, "chain", "")
}

// waitFor polls cond until it holds, failing the test after within.
func (r *passRig) waitFor(what string, within time.Duration, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("gave up after %s waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not a wait for state
	}
}

// runState returns the run's state and whether it settled.
func (r *passRig) runState(run uuid.UUID) (core.RunState, bool) {
	r.t.Helper()
	got, err := r.st.GetRun(context.Background(), run)
	if err != nil {
		r.t.Fatal(err)
	}
	return got.State, got.FinishedAt != nil
}

// TestARunHeldElsewhereStallsNothingElse: mode 83. An open transaction
// holds one run's row (a forgotten BEGIN ... FOR UPDATE) after a finish
// in it named it to the scheduler, whose sessions give up a lock wait after
// 300 ms. The scheduler goes on with everything else: it promotes and
// settles another run, reaps a lapsed lease in a third (its attempt used
// up: max_attempts stays 3) and fires a schedule tick; it records no
// outage of its own. The held run waits, untouched, until the holder lets
// go, and is then advanced.
func TestARunHeldElsewhereStallsNothingElse(t *testing.T) {
	const sweep = 200 * time.Millisecond
	r := newPassRig(t, func(c *Config) {
		c.SweepInterval, c.FullSweepInterval = sweep, time.Hour
		withLockTimeout(t, 300*time.Millisecond)(c)
	})
	r.s.cfg.Schedules = r.st
	held, other, lapsing := r.trigger(), r.trigger(), r.trigger()
	ha, oa := r.claim(held, "a", time.Minute), r.claim(other, "a", time.Minute)
	r.claim(lapsing, "a", time.Second)
	r.s.signals.held = make(chan []uuid.UUID, 64)
	r.runUntilCleanup()
	h := r.holdRun(held)
	r.succeed(ha)
	r.awaitHeld(held)
	if _, err := r.st.CreateSchedule(context.Background(), schedule.Definition{Name: "s", Workflow: "chain", Cron: "@every 1s"}, "test", ""); err != nil {
		t.Fatal(err)
	}

	r.succeed(oa)
	r.waitReady(other, "b", 10*time.Second)
	r.succeed(r.claim(other, "b", time.Minute))
	r.waitFor("the other run to settle", 10*time.Second, func() bool {
		st, settled := r.runState(other)
		return settled && st == core.RunSucceeded
	})
	r.waitFor("the lapsed lease to be reaped", 10*time.Second, func() bool { return r.task(lapsing, "a").State != "RUNNING" })
	if a := r.task(lapsing, "a"); a.Attempt != 1 || a.MaxAttempts != 3 {
		t.Fatalf("the reaped task: attempt %d of %d, want 1 of 3 (no attempt refunded: nothing was an outage)", a.Attempt, a.MaxAttempts)
	}
	r.waitFor("a schedule tick", 10*time.Second, func() bool {
		return testutil.ToFloat64(r.metrics.ScheduleTicks.WithLabelValues("fired")) >= 1
	})
	if b := r.task(held, "b"); b.State != "PENDING" {
		t.Fatalf("the held run's child is %s while its run is held, want PENDING", b.State)
	}
	if n := testutil.ToFloat64(r.metrics.SchedulerOutages); n != 0 {
		t.Fatalf("flowforge_scheduler_outages_total = %v with the database up, want 0", n)
	}
	if n := testutil.ToFloat64(r.metrics.LeasesReapedAfterOutage); n != 0 {
		t.Fatalf("flowforge_leases_reaped_after_outage_total = %v, want 0", n)
	}

	if err := h.Commit(); err != nil {
		t.Fatal(err)
	}
	r.waitReady(held, "b", 10*time.Second)
}

// TestAHeldRunIsPassedAgainOnceReleased: modes 55 and 83. With sweeps a
// minute apart and the full pass an hour away, a finish names a run whose
// row another transaction holds: the targeted pass hands it back, and with
// no other notification, once the holder lets go, the scheduler passes it
// again by itself and promotes the child (a held run is delayed, not
// forgotten).
func TestAHeldRunIsPassedAgainOnceReleased(t *testing.T) {
	r := newPassRig(t, func(c *Config) { c.SweepInterval, c.FullSweepInterval = SweepIntervalMax, time.Hour })
	run := r.trigger()
	a := r.claim(run, "a", time.Minute)
	r.s.signals.held = make(chan []uuid.UUID, 64)
	r.runUntilCleanup()
	h := r.holdRun(run)
	r.succeed(a)
	r.awaitHeld(run)
	if b := r.task(run, "b"); b.State != "PENDING" {
		t.Fatalf("b is %s while its run is held, want PENDING", b.State)
	}
	if err := h.Commit(); err != nil {
		t.Fatal(err)
	}
	r.waitReady(run, "b", 10*time.Second)
}

// failingStore is the scheduler's store with one AdvanceRuns failing
// (nothing done) once armed, and sweeps that find no candidates: only the
// scheduler passing the failed pass's runs again can advance them.
type failingStore struct {
	*store.Store
	mu     sync.Mutex
	err    error         // returned by the next AdvanceRuns, then nil
	failed chan struct{} // closed when it was returned
}

func (f *failingStore) arm(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *failingStore) AdvanceRuns(ctx context.Context, ids []uuid.UUID, actor string) (store.AdvanceResult, error) {
	f.mu.Lock()
	err := f.err
	f.err = nil
	f.mu.Unlock()
	if err != nil {
		close(f.failed)
		return store.AdvanceResult{}, err
	}
	return f.Store.AdvanceRuns(ctx, ids, actor)
}

func (f *failingStore) SweepCandidates(context.Context, int, store.Cursor) ([]uuid.UUID, store.Cursor, error) {
	return nil, store.Cursor{}, nil
}

// TestAFailedTargetedPassIsPassedAgainOnTheNextTurn: modes 57 and 83. The
// targeted pass a finish's notification starts fails once, the database
// refusing it (a lock timeout) or out of reach; no sweep can see the run
// (a minute away, no candidates; the full pass an hour away) and no other
// notification names it. The scheduler passes the run again by itself and
// promotes the child; only the lost database is an outage.
func TestAFailedTargetedPassIsPassedAgainOnTheNextTurn(t *testing.T) {
	for _, tc := range []struct {
		name        string
		err         error
		wantOutages float64
	}{
		{"refused", errRefused, 0},
		{"unreachable", errDown, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &failingStore{failed: make(chan struct{})}
			r := newPassRig(t, func(c *Config) {
				c.SweepInterval, c.FullSweepInterval = SweepIntervalMax, time.Hour
				fs.Store = c.Store.(*store.Store)
				c.Store = fs
			})
			run := r.trigger()
			a := r.claim(run, "a", time.Minute)
			r.runUntilCleanup()
			fs.arm(tc.err)
			r.succeed(a)
			select {
			case <-fs.failed:
			case <-time.After(10 * time.Second):
				t.Fatal("no targeted pass after a's finish")
			}
			r.waitReady(run, "b", 10*time.Second)
			r.waitFor("the outage count", 10*time.Second, func() bool {
				return testutil.ToFloat64(r.metrics.SchedulerOutages) == tc.wantOutages
			})
		})
	}
}
