package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// TestReapAfterAnOutageWaitsOneLeaseAndRefundsTheAttempt: mode 35. A lease
// that lapsed while the reaper could not reach the database is not reaped
// until one lease after the reaper's reconnect, and then without using up
// the attempt (a max_attempts 1 task goes RETRYING, not DEAD). Without an
// outage the same lease is buried at once.
func TestReapAfterAnOutageWaitsOneLeaseAndRefundsTheAttempt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneShot)
	const lease = 400 * time.Millisecond
	id := f.taskID(f.trigger("oneshot", ""), "a")
	f.claim(id, "w1", lease)
	f.waitLeaseExpired(id)
	back, err := f.s.Now(f.ctx) // the reaper reaches the database again
	if err != nil {
		t.Fatal(err)
	}
	req := store.ReapRequest{Limit: 10, Backoff: zeroBackoff, Actor: "reaper", Outage: &store.Outage{Until: back}}
	if res, err := f.s.Reap(f.ctx, req); err != nil || res.Reaped != 0 {
		t.Fatalf("reap inside the grace: %+v %v", res, err)
	}
	if st, _ := f.state(id); st != core.TaskRunning {
		t.Fatalf("state %s inside the grace", st)
	}
	f.waitDB("the grace to pass", `SELECT now() >= $1::timestamptz + $2::bigint * interval '1 millisecond'`, back, lease.Milliseconds())
	res, err := f.s.Reap(f.ctx, req)
	if err != nil || res.Reaped != 1 || res.Refunded != 1 {
		t.Fatalf("reap after the grace: %+v %v", res, err)
	}
	d := f.task(id)
	if d.State != core.TaskRetrying || d.Attempt != 1 || d.MaxAttempts != 2 {
		t.Fatalf("refunded reap: state %s attempt %d max %d; want RETRYING 1 of 2", d.State, d.Attempt, d.MaxAttempts)
	}
	if d.Error == nil || !strings.Contains(*d.Error, "database outage") {
		t.Fatalf("refunded reap error %v", d.Error)
	}
}

// TestReapBuriesALeaseThatLapsedAfterTheOutage: mode 35, the other side. A
// lease that lapsed after the reaper reached the database again counts as
// usual, and a lease that lapsed before the reaper's last pass before the
// outage is not refunded.
func TestReapBuriesALeaseThatLapsedAfterTheOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		outage func(f *fixture) store.Outage
	}{
		{"lapsed after the reconnect", func(f *fixture) store.Outage {
			return store.Outage{Until: f.dbTime(`SELECT now() - interval '1 hour'`)}
		}},
		{"lapsed before the outage began", func(f *fixture) store.Outage {
			return store.Outage{Since: f.dbTime(`SELECT now()`), Until: f.dbTime(`SELECT now()`)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.apply(oneShot)
			id := f.taskID(f.trigger("oneshot", ""), "a")
			f.claim(id, "w1", time.Millisecond)
			f.waitLeaseExpired(id)
			o := tc.outage(f)
			if !o.Until.IsZero() {
				f.waitDB("the grace to pass", `SELECT now() >= $1::timestamptz + interval '10 milliseconds'`, o.Until)
			}
			res, err := f.s.Reap(f.ctx, store.ReapRequest{Limit: 10, Backoff: zeroBackoff, Actor: "reaper", Outage: &o})
			if err != nil || res.Reaped != 1 || res.Refunded != 0 {
				t.Fatalf("reap: %+v %v", res, err)
			}
			f.wantState(id, core.TaskDead)
		})
	}
}

// TestAStalledReapReapsNothing: mode 35. A reap whose statements run past
// its NotAfter (the pass stalled behind an outage it has not seen yet)
// leaves an expired lease alone.
func TestAStalledReapReapsNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneShot)
	id := f.taskID(f.trigger("oneshot", ""), "a")
	f.claim(id, "w1", time.Millisecond)
	f.waitLeaseExpired(id)
	late := f.dbTime(`SELECT now() - interval '1 second'`)
	if res, err := f.s.Reap(f.ctx, store.ReapRequest{Limit: 10, Backoff: zeroBackoff, Actor: "reaper", NotAfter: late}); err != nil || res.Reaped != 0 {
		t.Fatalf("stalled reap: %+v %v", res, err)
	}
	f.wantState(id, core.TaskRunning)
}

// TestRenewNeverMovesALeaseBackwards: mode 36. A renewal computed with a
// shorter lease (or computed earlier and committed later) leaves the later
// expiry in place.
func TestRenewNeverMovesALeaseBackwards(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	id := f.taskID(f.trigger("one", ""), "a")
	c := f.claim(id, "w1", time.Hour)
	before := f.dbTime(`SELECT lease_expires_at FROM task_runs WHERE id = '` + id.String() + `'`)
	if r, err := f.s.Renew(f.ctx, id, c.FencingToken, time.Second); err != nil || !r.OK {
		t.Fatalf("renew: %+v %v", r, err)
	}
	if after := f.dbTime(`SELECT lease_expires_at FROM task_runs WHERE id = '` + id.String() + `'`); after.Before(before) {
		t.Fatalf("the lease moved backwards: %v -> %v", before, after)
	}
}

// TestARenewalThatWaitedForALockCommitsAFreshLeaseOrFails: mode 36. A
// renewal queued behind a table lock for less than its bound commits a
// lease measured from its write, not from its start; one held longer than
// its bound fails (lock_timeout) within about the bound, and writes nothing.
func TestARenewalThatWaitedForALockCommitsAFreshLeaseOrFails(t *testing.T) {
	t.Parallel()
	const lease = 4 * time.Second // bound: LockWaitFor(lease) = 1 s
	bound := store.LockWaitFor(lease)
	for _, tc := range []struct {
		name string
		hold time.Duration
		ok   bool
	}{
		{"held below the bound", bound * 6 / 10, true},
		{"held past the bound", 3 * bound, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.apply(oneTask)
			id := f.taskID(f.trigger("one", ""), "a")
			c := f.claim(id, "w1", lease)
			for range 3 { // the renewal's statement is prepared on the pool's connections
				if r, err := f.s.Renew(f.ctx, id, c.FencingToken, lease); err != nil || !r.OK {
					t.Fatalf("renew: %+v %v", r, err)
				}
			}
			before := f.dbTime(`SELECT lease_expires_at FROM task_runs WHERE id = '` + id.String() + `'`)
			tx, err := f.db.BeginTx(f.ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := tx.Exec(`LOCK TABLE task_runs IN ACCESS EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
			release := time.AfterFunc(tc.hold, func() { _ = tx.Rollback() })
			defer release.Stop()
			start := time.Now()
			r, err := f.s.Renew(f.ctx, id, c.FencingToken, lease)
			waited := time.Since(start)
			after := f.dbTime(`SELECT lease_expires_at FROM task_runs WHERE id = '` + id.String() + `'`)
			if !tc.ok {
				if !errors.Is(err, store.ErrLockTimeout) {
					t.Fatalf("renew held %v past its bound %v: %+v %v; want a lock timeout", tc.hold, bound, r, err)
				}
				if waited > bound+time.Second {
					t.Fatalf("renew failed after %v; bound %v", waited, bound)
				}
				if !after.Equal(before) {
					t.Fatalf("a failed renewal wrote the lease: %v -> %v", before, after)
				}
				return
			}
			if err != nil || !r.OK {
				t.Fatalf("renew: %+v %v", r, err)
			}
			// The lease left must be (nearly) a whole lease from the moment
			// the renewal returned, not a lease minus its wait.
			if left := f.dbDuration(`SELECT extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000 FROM task_runs WHERE id = '` + id.String() + `'`); left < lease-200*time.Millisecond {
				t.Fatalf("after waiting %v behind a lock the lease has %v left of %v: computed before the wait", waited, left, lease)
			}
		})
	}
}

// dbTime reads one timestamp from the database.
func (f *fixture) dbTime(query string) time.Time {
	f.t.Helper()
	var v time.Time
	if err := f.db.QueryRowContext(f.ctx, query).Scan(&v); err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
	return v
}

// dbDuration reads one number of milliseconds from the database.
func (f *fixture) dbDuration(query string) time.Duration {
	f.t.Helper()
	var ms float64
	if err := f.db.QueryRowContext(f.ctx, query).Scan(&ms); err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
	return time.Duration(ms * float64(time.Millisecond))
}
