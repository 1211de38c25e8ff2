package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
)

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
		f.createSchedule(schedule.Definition{Name: name, Workflow: "nightly-etl", Cron: "* * * * * *", Overlap: schedule.OverlapAllow})
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
		if want := schedule.IdempotencyKey(name, tk.ScheduledAt); key != want {
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
	f.createSchedule(schedule.Definition{Name: name, Workflow: "nightly-etl", Cron: "* * * * * *", Overlap: schedule.OverlapAllow})
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
			f.createSchedule(schedule.Definition{Name: "hourly", Workflow: "nightly-etl", Cron: "@every 1h", Catchup: c.catchup, CatchupWindow: c.window, Overlap: schedule.OverlapAllow})
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
			f.createSchedule(schedule.Definition{Name: "m", Workflow: "nightly-etl", Cron: "@every 10s", Overlap: c.overlap})
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
				want := "overlap skip: the previous run " + first.RunID.String() + " is RUNNING"
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
	f.createSchedule(schedule.Definition{Name: "m", Workflow: "nightly-etl", Cron: "@every 10s"})
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
	f.createSchedule(schedule.Definition{Name: "m", Workflow: "nightly-etl", Cron: "@every 10s"})
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

// TestAFailedTriggerNowIsRecordedAsAFailedTick: a trigger-now whose run
// cannot be created (the workflow's newest version needs a param the
// schedule does not give) returns the refusal, and the schedule's history
// keeps the attempt: a manual tick, failed, with the refusal as its reason,
// and the action audited; no run.
func TestAFailedTriggerNowIsRecordedAsAFailedTick(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	f.createSchedule(schedule.Definition{Name: "m", Workflow: "nightly-etl", Cron: "@every 10s"})
	f.apply(`
name: nightly-etl
tasks:
  - {name: extract, handler: noop, idempotency_key: "x-{{ .Params.day }}"}
`)
	tick, err := f.s.TriggerScheduleNow(f.ctx, "m", "tester", "backfill")
	if !errors.Is(err, core.ErrBadParams) {
		t.Fatalf("trigger-now: %v, want an error wrapping core.ErrBadParams", err)
	}
	if tick.ID == 0 || !tick.Manual || tick.Outcome != store.TickFailed || tick.RunID != nil || !strings.Contains(tick.Reason, "trigger-now: backfill; ") || !strings.Contains(tick.Reason, "day") {
		t.Fatalf("tick %+v, want a manual failed tick whose reason gives the refusal", tick)
	}
	sc, err := f.s.GetSchedule(f.ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Ticks) != 1 || sc.Ticks[0].ID != tick.ID || sc.Ticks[0].Outcome != store.TickFailed {
		t.Fatalf("schedule show: ticks %+v, want the failed tick", sc.Ticks)
	}
	if n := f.count(`SELECT count(*) FROM schedule_events WHERE action = 'trigger-now'`); n != 1 {
		t.Fatalf("%d trigger-now events, want 1", n)
	}
	if n := f.count(`SELECT count(*) FROM workflow_runs`); n != 0 {
		t.Fatalf("%d runs", n)
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
		mode    core.PauseMode
		outcome store.TickOutcome
		runs    int
		dropped int
	}{
		{core.PauseDrop, store.TickDropped, 0, 1},
		{core.PauseQueue, store.TickFired, 1, 0},
	}
	for _, c := range cases {
		t.Run(string(c.mode), func(t *testing.T) {
			t.Parallel()
			f := newScheduleFixture(t)
			f.createSchedule(schedule.Definition{Name: "m", Workflow: "nightly-etl", Cron: "@every 10s"})
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
	f.createSchedule(schedule.Definition{Name: "jit", Workflow: "nightly-etl", Cron: "@every 1m", Overlap: schedule.OverlapAllow})
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

// TestATickRendersTheTemplatesInItsTasksParams: a schedule's tick creates
// its run through the trigger, so the templates in the tasks' params render
// from the schedule's params there too (core.RenderRunTasks); a schedule
// whose params lack a param a template needs is refused at create, and a
// newer version that needs one the schedule lacks fails its tick, creating
// nothing.
func TestATickRendersTheTemplatesInItsTasksParams(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: greet
tasks:
  - {name: say, handler: shell, params: {command: [echo, "{{ .Params.date }}"]}}
`)
	if _, err := f.s.CreateSchedule(f.ctx, schedule.Definition{Name: "bare", Workflow: "greet", Cron: "@every 10s"}, "tester", ""); !errors.Is(err, core.ErrBadParams) ||
		!strings.Contains(err.Error(), `map has no entry for key "date"`) {
		t.Fatalf("create a schedule without the param: %v, want core.ErrBadParams naming it", err)
	}
	f.createSchedule(schedule.Definition{Name: "daily", Workflow: "greet", Cron: "@every 10s", Params: json.RawMessage(`{"date": "2026-11-30"}`)})
	f.createSchedule(schedule.Definition{Name: "later", Workflow: "greet", Cron: "@every 10s", Params: json.RawMessage(`{"date": "2026-12-01"}`)})
	f.backdateSchedule("daily", 15*time.Second)
	f.fire()
	daily := f.ticks("daily")
	if len(daily) != 1 || daily[0].Outcome != store.TickFired || daily[0].RunID == nil {
		t.Fatalf("ticks of daily %+v, want one fired", daily)
	}
	say := f.task(f.taskID(*daily[0].RunID, "say"))
	if string(say.Params) != `{"command": ["echo", "2026-11-30"]}` {
		t.Fatalf("the tick's task params %s, want the date rendered", say.Params)
	}

	f.apply(`
name: greet
tasks:
  - {name: say, handler: shell, params: {command: [echo, "{{ .Params.date }} {{ .Params.zone }}"]}}
`)
	f.backdateSchedule("later", 15*time.Second)
	f.fire()
	later := f.ticks("later")
	if len(later) != 1 || later[0].Outcome != store.TickFailed || !strings.Contains(later[0].Reason, `map has no entry for key "zone"`) {
		t.Fatalf("ticks of later %+v, want one failed naming the missing param", later)
	}
	if n := f.count(`SELECT count(*) FROM workflow_runs WHERE workflow_version = 2`); n != 0 {
		t.Fatalf("%d runs of the version the schedule cannot render", n)
	}
}
