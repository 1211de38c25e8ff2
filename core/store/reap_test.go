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

// TestARunningTaskWithoutALeaseIsReaped: a task RUNNING with no lease (a
// row a restore or a hand edit left so, which migration 00022's constraint,
// NOT VALID, does not check) is reaped as an expired lease, its error
// saying so. Before, the reaper's lease_expires_at < now() skipped it and
// it was RUNNING for ever. A held task (a sleep), RUNNING without a lease
// by design, is left alone.
func TestARunningTaskWithoutALeaseIsReaped(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneShot)
	f.apply("name: nap\ntasks:\n  - {name: s, sleep: {for: 24h}}\n")
	id := f.taskID(f.trigger("oneshot", ""), "a")
	f.claim(id, "w1", time.Hour)
	// The row as an older database may hold it: written before the
	// constraint, which the test lifts to write it.
	for _, q := range []string{
		`ALTER TABLE task_runs DROP CONSTRAINT task_runs_running_task_has_a_lease`,
		`UPDATE task_runs SET lease_expires_at = NULL WHERE id = '` + id.String() + `'`,
	} {
		if _, err := f.db.ExecContext(f.ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	nap := f.trigger("nap", "")
	held := f.taskID(nap, "s")
	f.advance()
	if st, _ := f.state(held); st != core.TaskRunning {
		t.Fatalf("the sleep is %s, want RUNNING (started)", st)
	}
	res, err := f.s.Reap(f.ctx, store.ReapRequest{Limit: 10, Backoff: zeroBackoff, Actor: "reaper"})
	if err != nil || res.Reaped != 1 {
		t.Fatalf("reap: %+v %v; want the lease-less task reaped", res, err)
	}
	d := f.task(id)
	const want = "RUNNING without a lease (a restore or a hand edit?): reaped as expired (attempt 1)"
	if d.State != core.TaskDead || d.Error == nil || *d.Error != want {
		t.Fatalf("reaped task: state %s error %v; want DEAD (its only attempt) with %q", d.State, d.Error, want)
	}
	if st, _ := f.state(held); st != core.TaskRunning {
		t.Fatalf("the sleeping task is %s: a held task without a lease was reaped", st)
	}
}

// TestTheSchemaRefusesARunningTaskWithoutALease: migration 00022. Writing a
// RUNNING task without a lease (a hand edit) is refused by the constraint
// task_runs_running_task_has_a_lease (SQLSTATE 23514).
func TestTheSchemaRefusesARunningTaskWithoutALease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneShot)
	id := f.taskID(f.trigger("oneshot", ""), "a")
	f.claim(id, "w1", time.Hour)
	_, err := f.db.ExecContext(f.ctx, `UPDATE task_runs SET lease_expires_at = NULL WHERE id = $1`, id)
	if err == nil || !strings.Contains(err.Error(), "task_runs_running_task_has_a_lease") || !strings.Contains(err.Error(), "23514") {
		t.Fatalf("hand edit: err %v; want the constraint task_runs_running_task_has_a_lease (23514)", err)
	}
}
