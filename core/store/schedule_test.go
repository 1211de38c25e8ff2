package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
)

const scheduledWorkflow = `
name: nightly-etl
tasks:
  - {name: extract, handler: noop}
  - {name: load, handler: noop, depends_on: [extract]}
`

const keyedWorkflow = `
name: keyed
tasks:
  - {name: only, handler: noop, idempotency_key: "k-{{ .Params.day }}"}
`

// newScheduleFixture is a fixture with the nightly-etl workflow applied.
func newScheduleFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	f.apply(scheduledWorkflow)
	return f
}

func (f *fixture) createSchedule(spec store.ScheduleSpec) store.Schedule {
	f.t.Helper()
	sc, err := f.s.CreateSchedule(f.ctx, spec, "tester", "")
	if err != nil {
		f.t.Fatalf("create schedule %q: %v", spec.Name, err)
	}
	return sc
}

// backdateSchedule sets the schedule's last-fired point to the database's clock,
// truncated to the second, minus ago.
func (f *fixture) backdateSchedule(name string, ago time.Duration) time.Time {
	f.t.Helper()
	var at time.Time
	err := f.db.QueryRowContext(f.ctx, `UPDATE schedules SET fired_through = date_trunc('second', now()) - $2 * interval '1 millisecond'
	 WHERE name = $1 RETURNING fired_through`, name, ago.Milliseconds()).Scan(&at)
	if err != nil {
		f.t.Fatalf("backdate %s: %v", name, err)
	}
	return at
}

func (f *fixture) fire() store.FireResult {
	f.t.Helper()
	res, err := f.s.FireDueTicks(f.ctx, store.FireRequest{Actor: "tester"})
	if err != nil {
		f.t.Fatalf("fire due ticks: %v", err)
	}
	return res
}

// ticks returns the schedule's ticks (manual ones too), oldest first.
func (f *fixture) ticks(name string) []store.Tick {
	f.t.Helper()
	rows, err := f.db.QueryContext(f.ctx, `SELECT t.scheduled_at, t.outcome, t.run_id, COALESCE(t.reason, '') FROM schedule_ticks t
	  JOIN schedules s ON s.id = t.schedule_id WHERE s.name = $1 ORDER BY t.scheduled_at, t.id`, name)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []store.Tick
	for rows.Next() {
		var tk store.Tick
		var run uuid.NullUUID
		if err := rows.Scan(&tk.ScheduledAt, &tk.Outcome, &run, &tk.Reason); err != nil {
			f.t.Fatal(err)
		}
		if run.Valid {
			tk.RunID = &run.UUID
		}
		out = append(out, tk)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

func TestCreateScheduleRefusesBadInput(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	f.apply(keyedWorkflow)
	f.createSchedule(store.ScheduleSpec{Name: "taken", Workflow: "nightly-etl", Cron: "@daily"})
	if _, _, err := f.s.ApplySchedule(f.ctx, store.ScheduleSpec{Name: "from-file", Workflow: "nightly-etl", Cron: "@daily", Owner: store.ScheduleOwnerFile}, "file", ""); err != nil {
		t.Fatal(err)
	}
	ok := store.ScheduleSpec{Name: "s", Workflow: "nightly-etl", Cron: "0 3 * * *"}
	with := func(mod func(*store.ScheduleSpec)) store.ScheduleSpec { s := ok; mod(&s); return s }
	cases := []struct {
		name string
		spec store.ScheduleSpec
		is   error
		want string
	}{
		{"no name", with(func(s *store.ScheduleSpec) { s.Name = "" }), schedule.ErrBadSchedule, `invalid schedule: schedule name is missing`},
		{"bad name", with(func(s *store.ScheduleSpec) { s.Name = "Nightly!" }), schedule.ErrBadSchedule, `invalid schedule: schedule name "Nightly!" must match [a-z0-9][a-z0-9._-]*`},
		{"bad cron", with(func(s *store.ScheduleSpec) { s.Cron = "0 25 * * *" }), schedule.ErrBadSchedule, `invalid schedule: cron "0 25 * * *": end of range (25) above maximum (23): 25`},
		{"unknown zone", with(func(s *store.ScheduleSpec) { s.Timezone = "Europe/Atlantis" }), schedule.ErrBadSchedule, `invalid schedule: unknown time zone "Europe/Atlantis"`},
		{"bad overlap", with(func(s *store.ScheduleSpec) { s.Overlap = "queue" }), schedule.ErrBadSchedule, `invalid schedule: overlap policy "queue": want skip, allow or cancel-previous`},
		{"bad catchup", with(func(s *store.ScheduleSpec) { s.Catchup = "some" }), schedule.ErrBadSchedule, `invalid schedule: catch-up policy "some": want none, one or all`},
		{"catchup without window", with(func(s *store.ScheduleSpec) { s.Catchup = schedule.CatchupAll }), schedule.ErrBadSchedule, `invalid schedule: catch-up all needs a catch-up window (how far back a missed tick may still fire)`},
		{"window without catch-up", with(func(s *store.ScheduleSpec) { s.CatchupWindow = time.Hour }), schedule.ErrBadSchedule,
			`invalid schedule: a catch-up window (1h0m0s) applies only with catch-up one or all, and catch-up is none (set catch-up, or leave the window out)`},
		{"window with catch-up none", with(func(s *store.ScheduleSpec) { s.Catchup = schedule.CatchupNone; s.CatchupWindow = time.Minute }), schedule.ErrBadSchedule,
			`invalid schedule: a catch-up window (1m0s) applies only with catch-up one or all, and catch-up is none (set catch-up, or leave the window out)`},
		{"negative window", with(func(s *store.ScheduleSpec) { s.CatchupWindow = -time.Minute }), schedule.ErrBadSchedule, `invalid schedule: catch-up window -1m0s is negative`},
		{"negative jitter", with(func(s *store.ScheduleSpec) { s.Jitter = -time.Second }), schedule.ErrBadSchedule, `invalid schedule: jitter -1s is negative`},
		{"jitter not below the gap", with(func(s *store.ScheduleSpec) { s.Cron = "*/5 * * * *"; s.Jitter = 5 * time.Minute }), schedule.ErrBadSchedule,
			`invalid schedule: jitter 5m0s is not below the gap between the schedule's fire times (5m0s): ticks fire in order, so a larger jitter delays every later tick`},
		{"jitter above the smallest gap", with(func(s *store.ScheduleSpec) { s.Cron = "0,10 * * * *"; s.Jitter = 20 * time.Minute }), schedule.ErrBadSchedule,
			`invalid schedule: jitter 20m0s is not below the gap between the schedule's fire times (10m0s): ticks fire in order, so a larger jitter delays every later tick`},
		{"@every below 1s", with(func(s *store.ScheduleSpec) { s.Cron = "@every 1ms" }), schedule.ErrBadSchedule, `invalid schedule: cron "@every 1ms": an @every interval must be at least 1s, got 1ms`},
		{"cron that never fires", with(func(s *store.ScheduleSpec) { s.Cron = "0 0 30 2 *" }), schedule.ErrBadSchedule, `invalid schedule: cron "0 0 30 2 *": never fires (no time matches it)`},
		{"bad owner", with(func(s *store.ScheduleSpec) { s.Owner = "api" }), schedule.ErrBadSchedule, `invalid schedule: owner "api": want cli or file`},
		{"params not an object", with(func(s *store.ScheduleSpec) { s.Params = json.RawMessage(`[1]`) }), core.ErrBadParams, `invalid params: want a JSON object, got an array`},
		{"params a key cannot render from", store.ScheduleSpec{Name: "k", Workflow: "keyed", Cron: "@daily"}, core.ErrBadParams, ""},
		{"unknown workflow", with(func(s *store.ScheduleSpec) { s.Workflow = "nope" }), store.ErrNotFound, ""},
		{"name taken", with(func(s *store.ScheduleSpec) { s.Name = "taken" }), store.ErrConflict, `conflict: schedule "taken" already exists`},
		{"name of the other owner", with(func(s *store.ScheduleSpec) { s.Name = "from-file" }), store.ErrConflict, `conflict: schedule "from-file" already exists, owned by a workflow file's schedules: (a cli schedule cannot take its name)`},
	}
	for _, c := range cases {
		_, err := f.s.CreateSchedule(f.ctx, c.spec, "tester", "")
		if !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want %v", c.name, err, c.is)
			continue
		}
		if c.want != "" && err.Error() != c.want {
			t.Errorf("%s: %q, want %q", c.name, err, c.want)
		}
	}
	if n := f.count(`SELECT count(*) FROM schedules`); n != 2 {
		t.Fatalf("%d schedules stored, want the 2 good ones", n)
	}
	// The file owner cannot take over a CLI schedule either.
	_, _, err := f.s.ApplySchedule(f.ctx, store.ScheduleSpec{Name: "taken", Workflow: "nightly-etl", Cron: "@hourly", Owner: store.ScheduleOwnerFile}, "file", "")
	if want := `conflict: schedule "taken" already exists, owned by the CLI (a file schedule cannot take its name)`; err == nil || err.Error() != want {
		t.Fatalf("file apply over a CLI schedule: %v, want %s", err, want)
	}
}

// TestConcurrentPassesFireEachTickOnce: eight schedulers' passes race over
// the same due ticks; each tick has one row and one run.
func TestConcurrentPassesFireEachTickOnce(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	// Rounds: eight passes race only when they read the due schedules
	// before any of them moved the last-fired point, which one round may
	// not manage (the tick-uniqueness mutant survived one run in two with
	// a single round).
	for round := range 10 {
		name := fmt.Sprintf("every-second-%d", round)
		f.createSchedule(store.ScheduleSpec{Name: name, Workflow: "nightly-etl", Cron: "* * * * * *", Overlap: schedule.OverlapAllow})
		f.backdateSchedule(name, 5*time.Second)
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := f.s.FireDueTicks(f.ctx, store.FireRequest{Actor: "scheduler-" + string(rune('a'+i))})
				errs <- err
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		f.checkOneRunPerTick(fmt.Sprintf("round %d", round), name, 5)
	}
}

// checkOneRunPerTick fails unless the schedule name has at least min
// ticks, each fired once, each with its own run keyed by the tick.
func (f *fixture) checkOneRunPerTick(what, name string, min int) {
	f.t.Helper()
	ticks := f.ticks(name)
	if len(ticks) < min {
		f.t.Fatalf("%s: %d ticks fired, want at least the %d backdated", what, len(ticks), min)
	}
	seen := map[time.Time]bool{}
	for _, tk := range ticks {
		if seen[tk.ScheduledAt] {
			f.t.Fatalf("%s: tick %v recorded twice", what, tk.ScheduledAt)
		}
		seen[tk.ScheduledAt] = true
		if tk.Outcome != store.TickFired || tk.RunID == nil {
			f.t.Fatalf("%s: tick %v: %s, run %v", what, tk.ScheduledAt, tk.Outcome, tk.RunID)
		}
		var key string
		if err := f.db.QueryRowContext(f.ctx, `SELECT idempotency_key FROM workflow_runs WHERE id = $1`, *tk.RunID).Scan(&key); err != nil {
			f.t.Fatal(err)
		}
		if want := store.ScheduleIdempotencyKey(name, tk.ScheduledAt); key != want {
			f.t.Fatalf("%s: run key %q, want %q", what, key, want)
		}
	}
	if runs := f.count(`SELECT count(*) FROM workflow_runs WHERE idempotency_key LIKE 'schedule:' || $1 || ':%'`, name); runs != len(ticks) {
		f.t.Fatalf("%s: %d runs for %d ticks", what, runs, len(ticks))
	}
}

// TestTwoPassesThatReadTheSameDueTicksFireEachOnce: a session holds the
// schedule's row while two scheduler passes start; both read the same due
// ticks and wait for the row (seen in pg_stat_activity), so both go on to
// fire every one of them, one after the other: only the tick's unique key
// (and, for its run, the run's idempotency key) keeps each tick to one row
// and one run. The test above races eight passes with no lock and needs
// them to overlap; this one needs no luck.
func TestTwoPassesThatReadTheSameDueTicksFireEachOnce(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	const name = "every-second"
	f.createSchedule(store.ScheduleSpec{Name: name, Workflow: "nightly-etl", Cron: "* * * * * *", Overlap: schedule.OverlapAllow})
	f.backdateSchedule(name, 3*time.Second)
	held := f.hold()
	f.exec(held, `SELECT 1 FROM schedules WHERE name = $1 FOR UPDATE`, name)
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			_, err := f.s.FireDueTicks(f.ctx, store.FireRequest{Actor: fmt.Sprintf("scheduler-%d", i)})
			errs <- err
		}()
	}
	f.waitBlocked(2)
	if err := held.Rollback(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	f.checkOneRunPerTick("two passes", name, 3)
}

// TestAMissedTickFollowsTheCatchupPolicy: the scheduler was down for 2h30m
// (the last-fired point backdated in SQL); an "@every 1h" schedule missed
// two ticks, 1h30m and 30m ago.
func TestAMissedTickFollowsTheCatchupPolicy(t *testing.T) {
	t.Parallel()
	cases := []struct {
		catchup schedule.Catchup
		window  time.Duration
		fired   []time.Duration // after the backdated point
	}{
		{schedule.CatchupNone, 0, nil},
		{schedule.CatchupOne, 3 * time.Hour, []time.Duration{2 * time.Hour}},
		{schedule.CatchupAll, 3 * time.Hour, []time.Duration{time.Hour, 2 * time.Hour}},
		{schedule.CatchupAll, time.Hour, []time.Duration{2 * time.Hour}},
	}
	for _, c := range cases {
		t.Run(string(c.catchup)+"-"+c.window.String(), func(t *testing.T) {
			t.Parallel()
			f := newScheduleFixture(t)
			f.createSchedule(store.ScheduleSpec{Name: "hourly", Workflow: "nightly-etl", Cron: "@every 1h", Catchup: c.catchup, CatchupWindow: c.window, Overlap: schedule.OverlapAllow})
			from := f.backdateSchedule("hourly", 150*time.Minute)
			res := f.fire()
			ticks := f.ticks("hourly")
			if len(ticks) != len(c.fired) {
				t.Fatalf("%d ticks fired, want %d", len(ticks), len(c.fired))
			}
			for i, tk := range ticks {
				if want := from.Add(c.fired[i]); !tk.ScheduledAt.Equal(want) || tk.Outcome != store.TickFired {
					t.Fatalf("tick %d at %v (%s), want %v fired", i, tk.ScheduledAt, tk.Outcome, want)
				}
			}
			if want := 2 - len(c.fired); res.Missed != want {
				t.Errorf("missed %d, want %d", res.Missed, want)
			}
			var through time.Time
			if err := f.db.QueryRowContext(f.ctx, `SELECT fired_through FROM schedules WHERE name = 'hourly'`).Scan(&through); err != nil {
				t.Fatal(err)
			}
			if want := from.Add(2 * time.Hour); !through.Equal(want) {
				t.Errorf("fired through %v, want %v", through, want)
			}
			if again := f.fire(); len(again.Ticks) != 0 {
				t.Fatalf("a second pass fired %d more ticks", len(again.Ticks))
			}
		})
	}
}

// TestOverlapPolicies: a tick while the previous run is still open.
func TestOverlapPolicies(t *testing.T) {
	t.Parallel()
	cases := []struct {
		overlap schedule.Overlap
		second  store.TickOutcome
	}{
		{schedule.OverlapSkip, store.TickSkipped},
		{schedule.OverlapAllow, store.TickFired},
		{schedule.OverlapCancelPrevious, store.TickFired},
	}
	for _, c := range cases {
		t.Run(string(c.overlap), func(t *testing.T) {
			t.Parallel()
			f := newScheduleFixture(t)
			f.createSchedule(store.ScheduleSpec{Name: "m", Workflow: "nightly-etl", Cron: "@every 10s", Overlap: c.overlap})
			f.backdateSchedule("m", 25*time.Second) // ticks 15s and 5s ago
			res := f.fire()
			if len(res.Ticks) != 2 {
				t.Fatalf("%d ticks, want 2: %+v", len(res.Ticks), res.Ticks)
			}
			first, second := res.Ticks[0], res.Ticks[1]
			if first.Outcome != store.TickFired || second.Outcome != c.second {
				t.Fatalf("outcomes %s, %s; want fired, %s", first.Outcome, second.Outcome, c.second)
			}
			switch c.overlap {
			case schedule.OverlapSkip:
				want := "overlap skip: the previous run " + first.RunID.String() + " is PENDING"
				if second.Reason != want || second.RunID != uuid.Nil {
					t.Fatalf("skipped tick: reason %q run %v, want %q", second.Reason, second.RunID, want)
				}
				if n := f.count(`SELECT count(*) FROM workflow_runs`); n != 1 {
					t.Fatalf("%d runs, want 1", n)
				}
			case schedule.OverlapCancelPrevious:
				if len(second.Cancelled) != 1 || second.Cancelled[0] != first.RunID {
					t.Fatalf("cancelled %v, want [%s]", second.Cancelled, first.RunID)
				}
				if n := f.count(`SELECT count(*) FROM workflow_runs WHERE id = $1 AND cancel_requested_at IS NOT NULL`, first.RunID); n != 1 {
					t.Fatal("the previous run's cancellation was not requested")
				}
			case schedule.OverlapAllow:
				if n := f.count(`SELECT count(*) FROM workflow_runs WHERE cancel_requested_at IS NULL`); n != 2 {
					t.Fatalf("%d open runs, want 2", n)
				}
			}
			// Once the previous run is finished, a skip schedule fires again.
			if c.overlap == schedule.OverlapSkip {
				if _, err := f.s.CancelRun(f.ctx, first.RunID, "tester", "done"); err != nil {
					t.Fatal(err)
				}
				if _, err := f.db.ExecContext(f.ctx, `UPDATE workflow_runs SET state = 'CANCELLED' WHERE id = $1`, first.RunID); err != nil {
					t.Fatal(err)
				}
				f.backdateSchedule("m", 12*time.Second) // a tick 2s ago
				if res := f.fire(); len(res.Ticks) != 1 || res.Ticks[0].Outcome != store.TickFired {
					t.Fatalf("after the previous run ended: %+v", res.Ticks)
				}
			}
		})
	}
}

// TestATickDiedMidTransactionFiresOnceAfterwards: a pass that dies after
// inserting its tick row (its context ends before the commit) leaves
// nothing; the next pass fires the tick once.
func TestATickDiedMidTransactionFiresOnceAfterwards(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	f.createSchedule(store.ScheduleSpec{Name: "m", Workflow: "nightly-etl", Cron: "@every 10s"})
	f.backdateSchedule("m", 15*time.Second)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	_, err := f.s.FireDueTicks(ctx, store.FireRequest{Actor: "dying", MidTick: cancel})
	if err == nil {
		t.Fatal("the dying pass reported no error")
	}
	if n := f.count(`SELECT count(*) FROM schedule_ticks`) + f.count(`SELECT count(*) FROM workflow_runs`); n != 0 {
		t.Fatalf("the dying pass left %d rows", n)
	}
	res := f.fire()
	if len(res.Ticks) != 1 || res.Ticks[0].Outcome != store.TickFired {
		t.Fatalf("after the crash: %+v", res.Ticks)
	}
	if again := f.fire(); len(again.Ticks) != 0 {
		t.Fatalf("fired again: %+v", again.Ticks)
	}
}

// TestATickWhoseRunCannotBeCreatedIsRecordedFailed: the workflow's newest
// version needs a param the schedule does not give.
func TestATickWhoseRunCannotBeCreatedIsRecordedFailed(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	f.createSchedule(store.ScheduleSpec{Name: "m", Workflow: "nightly-etl", Cron: "@every 10s"})
	f.apply(`
name: nightly-etl
tasks:
  - {name: extract, handler: noop, idempotency_key: "x-{{ .Params.day }}"}
`)
	f.backdateSchedule("m", 15*time.Second)
	res := f.fire()
	if len(res.Ticks) != 1 || res.Ticks[0].Outcome != store.TickFailed || res.Ticks[0].Reason == "" {
		t.Fatalf("ticks %+v, want one failed with a reason", res.Ticks)
	}
	if n := f.count(`SELECT count(*) FROM workflow_runs`); n != 0 {
		t.Fatalf("%d runs", n)
	}
}

func TestScheduleOperatorActions(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	f.createSchedule(store.ScheduleSpec{Name: "m", Workflow: "nightly-etl", Cron: "@every 10s", Params: json.RawMessage(`{"day":"mon"}`)})
	if _, err := f.s.PauseSchedule(f.ctx, "m", "tester", ""); !errors.Is(err, core.ErrBadReason) {
		t.Fatalf("pause without a reason: %v", err)
	}
	if changed, err := f.s.PauseSchedule(f.ctx, "m", "tester", "maintenance"); err != nil || !changed {
		t.Fatalf("pause: changed %v, %v", changed, err)
	}
	// Pausing again changes nothing (and audits nothing: see below).
	if changed, err := f.s.PauseSchedule(f.ctx, "m", "tester", "again"); err != nil || changed {
		t.Fatalf("second pause: changed %v, %v; want false, nil", changed, err)
	}
	f.backdateSchedule("m", 35*time.Second)
	if res := f.fire(); len(res.Ticks) != 0 {
		t.Fatalf("a paused schedule fired %+v", res.Ticks)
	}
	tick, err := f.s.TriggerScheduleNow(f.ctx, "m", "tester", "backfill monday")
	if err != nil {
		t.Fatal(err)
	}
	if !tick.Manual || tick.Outcome != store.TickFired || tick.RunID == nil || tick.RunState != string(core.RunPending) {
		t.Fatalf("trigger-now tick %+v (want its run PENDING)", tick)
	}
	var params string
	if err := f.db.QueryRowContext(f.ctx, `SELECT params::text FROM workflow_runs WHERE id = $1`, *tick.RunID).Scan(&params); err != nil || params != `{"day": "mon"}` {
		t.Fatalf("run params %s, %v", params, err)
	}
	if changed, err := f.s.ResumeSchedule(f.ctx, "m", "tester", "done"); err != nil || !changed {
		t.Fatalf("resume: changed %v, %v", changed, err)
	}
	// The ticks of the pause are not caught up.
	if res := f.fire(); len(res.Ticks) != 0 {
		t.Fatalf("resume caught up %+v", res.Ticks)
	}
	if changed, err := f.s.ResumeSchedule(f.ctx, "m", "tester", "again"); err != nil || changed {
		t.Fatalf("second resume: changed %v, %v; want false, nil", changed, err)
	}
	sc, err := f.s.GetSchedule(f.ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Ticks) != 1 || sc.Ticks[0].RunState != "PENDING" || sc.ReadAt.IsZero() {
		t.Fatalf("show: ticks %+v read at %v", sc.Ticks, sc.ReadAt)
	}
	// Deleting the tick's run (the retention pruner) keeps the tick.
	if _, err := f.db.ExecContext(f.ctx, `DELETE FROM workflow_runs WHERE id = $1`, *tick.RunID); err != nil {
		t.Fatalf("delete the run of a tick: %v", err)
	}
	if sc, err = f.s.GetSchedule(f.ctx, "m"); err != nil || len(sc.Ticks) != 1 || sc.Ticks[0].RunState != "" {
		t.Fatalf("after the run was pruned: %+v, %v", sc.Ticks, err)
	}
	if err := f.s.DeleteSchedule(f.ctx, "m", "tester", "retired"); err != nil {
		t.Fatal(err)
	}
	if err := f.s.DeleteSchedule(f.ctx, "m", "tester", "retired"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := f.s.GetSchedule(f.ctx, "m"); err == nil || err.Error() != `schedule "m": not found` {
		t.Fatalf("get deleted: %v", err)
	}
	var actions []string
	rows, err := f.db.QueryContext(f.ctx, `SELECT action || ':' || actor || ':' || reason FROM schedule_events WHERE schedule_name = 'm' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			t.Fatal(err)
		}
		actions = append(actions, a)
	}
	want := []string{"create:tester:", "pause:tester:maintenance", "trigger-now:tester:backfill monday", "resume:tester:done", "delete:tester:retired"}
	if len(actions) != len(want) {
		t.Fatalf("audit %v, want %v", actions, want)
	}
	for i := range want {
		if actions[i] != want[i] {
			t.Fatalf("audit %v, want %v", actions, want)
		}
	}
}

func TestListSchedules(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	f.createSchedule(store.ScheduleSpec{Name: "b", Workflow: "nightly-etl", Cron: "@every 10s", Timezone: "Europe/Berlin"})
	f.createSchedule(store.ScheduleSpec{Name: "a", Workflow: "nightly-etl", Cron: "0 3 * * *", Catchup: schedule.CatchupOne, CatchupWindow: time.Hour, Jitter: time.Minute})
	f.backdateSchedule("b", 15*time.Second)
	f.fire()
	list, err := f.s.ListSchedules(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" {
		t.Fatalf("list %+v", list)
	}
	a, b := list[0], list[1]
	if a.Timezone != "UTC" || a.Overlap != schedule.OverlapSkip || a.Catchup != schedule.CatchupOne || a.CatchupWindowMS != 3600000 || a.JitterMS != 60000 || a.Owner != store.ScheduleOwnerCLI || len(a.Ticks) != 0 {
		t.Fatalf("a: %+v", a)
	}
	if b.Timezone != "Europe/Berlin" || len(b.Ticks) != 1 || b.Ticks[0].Outcome != store.TickFired {
		t.Fatalf("b: %+v", b)
	}
}

func TestGetScheduleShowsTheLastTenTicksNewestFirst(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	f.createSchedule(store.ScheduleSpec{Name: "s", Workflow: "nightly-etl", Cron: "* * * * * *", Overlap: schedule.OverlapAllow})
	f.backdateSchedule("s", 15*time.Second)
	if res := f.fire(); len(res.Ticks) < 15 {
		t.Fatalf("%d ticks fired, want at least 15", len(res.Ticks))
	}
	sc, err := f.s.GetSchedule(f.ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Ticks) != store.ScheduleTicksShown {
		t.Fatalf("%d ticks shown, want %d", len(sc.Ticks), store.ScheduleTicksShown)
	}
	for i := 1; i < len(sc.Ticks); i++ {
		if !sc.Ticks[i].ScheduledAt.Before(sc.Ticks[i-1].ScheduledAt) || sc.Ticks[i].RunState != "PENDING" {
			t.Fatalf("tick %d: %+v after %+v", i, sc.Ticks[i], sc.Ticks[i-1])
		}
	}
	if _, err := f.s.TriggerScheduleNow(f.ctx, "nope", "tester", "why"); err == nil || err.Error() != `schedule "nope": not found` {
		t.Fatalf("trigger-now of an unknown schedule: %v", err)
	}
	if _, err := f.s.PauseSchedule(f.ctx, "nope", "tester", "why"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("pause of an unknown schedule: %v", err)
	}
}

// TestATickOfAPausedWorkflowIsDroppedOrQueuedByThePausesMode: a schedule
// tick goes through the trigger, so a workflow paused with mode drop records
// the tick dropped (decided, with why; no run; the drop counted on the
// pause) and one paused with mode queue creates the tick's run, whose tasks
// wait unclaimed until the resume.
func TestATickOfAPausedWorkflowIsDroppedOrQueuedByThePausesMode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode    store.PauseMode
		outcome store.TickOutcome
		runs    int
		dropped int
	}{
		{store.PauseDrop, store.TickDropped, 0, 1},
		{store.PauseQueue, store.TickFired, 1, 0},
	}
	for _, c := range cases {
		t.Run(string(c.mode), func(t *testing.T) {
			t.Parallel()
			f := newScheduleFixture(t)
			f.createSchedule(store.ScheduleSpec{Name: "m", Workflow: "nightly-etl", Cron: "@every 10s"})
			if _, err := f.s.PauseWorkflow(f.ctx, "nightly-etl", c.mode, "tester", "incident"); err != nil {
				t.Fatal(err)
			}
			f.backdateSchedule("m", 15*time.Second)
			res := f.fire()
			if len(res.Ticks) != 1 || res.Ticks[0].Outcome != c.outcome {
				t.Fatalf("ticks %+v, want one %s", res.Ticks, c.outcome)
			}
			if c.outcome == store.TickDropped && res.Ticks[0].Reason == "" {
				t.Errorf("a dropped tick says nothing of why")
			}
			if n := f.count(`SELECT count(*) FROM workflow_runs`); n != c.runs {
				t.Fatalf("%d runs, want %d", n, c.runs)
			}
			if n := f.count(`SELECT dropped FROM workflow_pauses WHERE workflow_name = 'nightly-etl'`); n != c.dropped {
				t.Errorf("the pause counted %d drops, want %d", n, c.dropped)
			}
			if again := f.fire(); len(again.Ticks) != 0 {
				t.Fatalf("the tick was not decided: a second pass fired %d more", len(again.Ticks))
			}
			if c.runs == 0 {
				return
			}
			var id uuid.UUID
			var tok int64
			if err := f.db.QueryRowContext(f.ctx, `SELECT id, fencing_token FROM task_runs WHERE state = 'READY'`).Scan(&id, &tok); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := f.s.Claim(f.ctx, id, tok, "w1", time.Minute); err != nil || ok {
				t.Fatalf("claim of a queued tick's task while paused: ok=%v err=%v, want refused", ok, err)
			}
		})
	}
}

// TestATickHeldBackByAnEarlierTicksJitterIsNotMissed: a schedule stored
// with a jitter above its gap (before that was refused; set in SQL) has a
// tick whose jittered start passed just now and a later tick whose own
// jittered start passed more than the grace ago: the later one was held
// back by the earlier (ticks fire in order), so it fires on time too; no
// tick is missed. On the database's clock: the last-fired point is
// backdated in SQL.
func TestATickHeldBackByAnEarlierTicksJitterIsNotMissed(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	f.createSchedule(store.ScheduleSpec{Name: "jit", Workflow: "nightly-etl", Cron: "@every 1m", Overlap: schedule.OverlapAllow})
	const jitter = 10 * time.Minute
	var now time.Time
	if err := f.db.QueryRowContext(f.ctx, `UPDATE schedules SET jitter_ms = $1 WHERE name = 'jit' RETURNING date_trunc('second', now())`, jitter.Milliseconds()).Scan(&now); err != nil {
		t.Fatal(err)
	}
	// A last-fired point whose first tick starts (with its jitter) 10 to
	// 30s ago, the second more than 2m before the first.
	var from time.Time
	for ago := time.Minute; ago < 12*time.Minute && from.IsZero(); ago += time.Second {
		f1 := now.Add(-ago)
		t1, t2 := f1.Add(time.Minute), f1.Add(2*time.Minute)
		at1, at2 := t1.Add(schedule.Jitter("jit", t1, jitter)), t2.Add(schedule.Jitter("jit", t2, jitter))
		if lag := now.Sub(at1); lag >= 10*time.Second && lag <= 30*time.Second && at2.Before(at1.Add(-2*time.Minute)) {
			from = f1
		}
	}
	if from.IsZero() {
		t.Fatal("no last-fired point gives the two ticks wanted")
	}
	if _, err := f.db.ExecContext(f.ctx, `UPDATE schedules SET fired_through = $1 WHERE name = 'jit'`, from); err != nil {
		t.Fatal(err)
	}
	res, err := f.s.FireDueTicks(f.ctx, store.FireRequest{Actor: "tester", Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Missed != 0 {
		t.Fatalf("missed %d ticks held back by an earlier tick's jitter, want 0", res.Missed)
	}
	ticks := f.ticks("jit")
	if len(ticks) < 2 || !ticks[0].ScheduledAt.Equal(from.Add(time.Minute)) || !ticks[1].ScheduledAt.Equal(from.Add(2*time.Minute)) {
		t.Fatalf("ticks %+v, want the ones at %v and %v fired", ticks, from.Add(time.Minute), from.Add(2*time.Minute))
	}
}
