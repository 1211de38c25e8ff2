package store_test

import (
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
