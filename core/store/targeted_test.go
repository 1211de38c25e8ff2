package store_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// joinOfTwo is a join whose two parents can finish together.
const joinOfTwo = `
name: join2
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: noop}
  - {name: join, handler: noop, depends_on: [a, b]}
`

// joinWithParentsRunning triggers a run of joinOfTwo, claims both parents,
// and returns the run, its tasks and the two claims.
func (f *fixture) joinWithParentsRunning() (uuid.UUID, map[string]store.TaskRun, store.ClaimedTask, store.ClaimedTask) {
	f.t.Helper()
	run := f.trigger("join2", "")
	ts := f.tasks(run)
	return run, ts, f.claim(ts["a"].ID, "w1", time.Minute), f.claim(ts["b"].ID, "w2", time.Minute)
}

// chainOfTwo is a parent and its child.
const chainOfTwo = `
name: chain2
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: noop, depends_on: [a]}
`

// passAtOnce runs a targeted pass over ids while h holds some of their run
// rows, and returns its result. A pass that waits for a lock fails the
// test: h is rolled back first, so that the pass ends.
func (f *fixture) passAtOnce(h *sql.Tx, ids ...uuid.UUID) store.AdvanceResult {
	f.t.Helper()
	type outcome struct {
		res store.AdvanceResult
		err error
	}
	out := make(chan outcome, 1)
	go func() {
		res, err := f.s.AdvanceRuns(f.ctx, ids, "targeted")
		out <- outcome{res, err}
	}()
	var o outcome
	f.waitUntil("the targeted pass to return", func() bool {
		select {
		case o = <-out:
			return true
		default:
		}
		if f.blocked() > 0 {
			_ = h.Rollback()
			o = <-out
			f.t.Fatalf("the targeted pass waited for a run another transaction holds (once the holder rolled back it returned %+v, %v)", o.res, o.err)
		}
		return false
	})
	if o.err != nil {
		f.t.Fatalf("targeted pass: %v", o.err)
	}
	return o.res
}

// holdRun begins a transaction that locks the run's row, as a forgotten
// BEGIN; SELECT ... FOR UPDATE in psql does (or a long requeue, a run
// delete, another scheduler's pass); it is rolled back in cleanup unless
// committed.
func (f *fixture) holdRun(run uuid.UUID) *sql.Tx {
	f.t.Helper()
	h := f.hold()
	f.exec(h, `SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE`, run)
	return h
}

// TestATargetedPassSkipsAHeldRunAndHandsItBack: modes 55 and 83. A
// transaction holds run A's row and finishes A's parent inside it. A
// targeted pass over A and B does not wait for it: it advances B at once
// (promotes B's child) and hands A back as held, untouched. Once the holder
// has committed, a later pass over the runs handed back begins after that
// commit, sees the finish and promotes A's child.
func TestATargetedPassSkipsAHeldRunAndHandsItBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(chainOfTwo)
	held, other := f.trigger("chain2", ""), f.trigger("chain2", "")
	hts, ots := f.tasks(held), f.tasks(other)
	ha, oa := f.claim(hts["a"].ID, "w1", time.Minute), f.claim(ots["a"].ID, "w1", time.Minute)
	h := f.holdRun(held)
	f.exec(h, `UPDATE task_runs SET state = 'SUCCEEDED', finished_at = now(), lease_expires_at = NULL WHERE id = $1`, ha.ID)
	f.succeedUncounted(oa)
	res := f.passAtOnce(h, held, other)
	if res.Runs != 1 || res.Promoted != 1 || !slices.Equal(res.Held, []uuid.UUID{held}) {
		t.Fatalf("the pass beside a held run: %+v; want the other run locked and its child promoted, the held run handed back", res)
	}
	f.wantState(ots["b"].ID, core.TaskReady)
	f.wantState(hts["b"].ID, core.TaskPending)
	if n := f.count(`SELECT count(*) FROM task_events WHERE run_id = $1 AND actor = 'targeted'`, held); n != 0 {
		t.Fatalf("the pass wrote %d events in the run it could not lock", n)
	}
	f.commit(h)
	res, err := f.s.AdvanceRuns(f.ctx, res.Held, "targeted")
	if err != nil || res.Runs != 1 || res.Promoted != 1 || len(res.Held) != 0 {
		t.Fatalf("the pass after the holder committed: %+v, %v; want the run locked and its child promoted", res, err)
	}
	f.wantState(hts["b"].ID, core.TaskReady)
	if n := f.outboxRows(hts["b"].ID); n != 1 {
		t.Fatalf("the held run's child has %d outbox rows, want 1", n)
	}
}

// TestTwoTargetedPassesOverAJoinPromoteItOnce: modes 20 and 55. Both
// parents of a join finish together while a third session holds the run,
// and each finish's notification starts a targeted pass (two schedulers,
// each woken by one finish). Neither waits: each hands the run back
// untouched. Passed again together once the holder let go, the join is
// promoted exactly once, with one dispatch, and never missed: each of the
// two either advanced the run or found it held by the other.
func TestTwoTargetedPassesOverAJoinPromoteItOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(joinOfTwo)
	run, ts, a, b := f.joinWithParentsRunning()
	h := f.holdRun(run)
	together(2, func(i int) { f.succeedUncounted([]store.ClaimedTask{a, b}[i]) })
	for i := range 2 {
		if res := f.passAtOnce(h, run); res.Runs != 0 || res.Promoted != 0 || !slices.Equal(res.Held, []uuid.UUID{run}) {
			t.Fatalf("targeted pass %d over the held run: %+v; want it handed back untouched", i+1, res)
		}
	}
	f.commit(h)
	var res [2]store.AdvanceResult
	together(2, func(i int) {
		r, err := f.s.AdvanceRuns(f.ctx, []uuid.UUID{run}, "targeted")
		if err != nil {
			t.Errorf("targeted pass %d: %v", i+1, err)
		}
		res[i] = r
	})
	for i, r := range res {
		if r.Runs+len(r.Held) != 1 {
			t.Fatalf("targeted pass %d after the holder let go: %+v; want the run advanced or handed back", i+1, r)
		}
	}
	if res[0].Promoted+res[1].Promoted != 1 {
		t.Fatalf("two targeted passes promoted %d and %d tasks, want the join once", res[0].Promoted, res[1].Promoted)
	}
	if n := f.outboxRows(ts["join"].ID); n != 1 {
		t.Fatalf("the join has %d outbox rows, want 1", n)
	}
	if ev := f.count(`SELECT count(*) FROM task_events WHERE task_run_id = $1 AND to_state = 'READY'`, ts["join"].ID); ev != 1 {
		t.Fatalf("the join was promoted %d times, want once", ev)
	}
}

// TestATargetedPassNeverAdvancesARunItCouldNotLock: mode 83. Whatever the
// held run has to do (a child to promote, in a run whose row the pass
// would not otherwise write; or its settling), a targeted pass that could
// not lock its row writes nothing in it: its snapshot may predate what the
// holder is about to commit. It returns at once and hands the run back.
func TestATargetedPassNeverAdvancesARunItCouldNotLock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// prepare leaves the run with something a pass would do.
		prepare func(f *fixture, run uuid.UUID, ts map[string]store.TaskRun)
	}{
		{"a child to promote", func(f *fixture, run uuid.UUID, ts map[string]store.TaskRun) {
			f.succeed(f.claim(ts["a"].ID, "w1", time.Minute))
			if _, err := f.db.ExecContext(f.ctx, `UPDATE workflow_runs SET state = 'RUNNING', started_at = now() WHERE id = $1`, run); err != nil {
				f.t.Fatal(err)
			}
		}},
		{"a run to settle", func(f *fixture, run uuid.UUID, ts map[string]store.TaskRun) {
			f.succeed(f.claim(ts["a"].ID, "w1", time.Minute))
			if _, err := f.s.AdvanceRuns(f.ctx, []uuid.UUID{run}, "setup"); err != nil {
				f.t.Fatal(err)
			}
			f.succeed(f.claim(ts["b"].ID, "w1", time.Minute))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.apply(chainOfTwo)
			run := f.trigger("chain2", "")
			ts := f.tasks(run)
			tc.prepare(f, run, ts)
			before := f.run(run)
			h := f.holdRun(run)
			res := f.passAtOnce(h, run)
			if res.Runs != 0 || res.Promoted != 0 || res.RunsChanged != 0 || res.RunsSettled != 0 || !slices.Equal(res.Held, []uuid.UUID{run}) {
				t.Fatalf("a pass over a run it could not lock: %+v; want nothing locked, nothing done, the run handed back", res)
			}
			if n := f.count(`SELECT count(*) FROM task_events WHERE run_id = $1 AND actor = 'targeted'`, run); n != 0 {
				t.Fatalf("the pass wrote %d events in the run it could not lock", n)
			}
			if after := f.run(run); after.State != before.State || (after.FinishedAt == nil) != (before.FinishedAt == nil) {
				t.Fatalf("the held run went from %s (finished %v) to %s (finished %v)", before.State, before.FinishedAt, after.State, after.FinishedAt)
			}
		})
	}
}

// TestATargetedPassAdvancesOnlyTheRunsNamed: a targeted pass promotes and
// settles the runs it is given and leaves every other open run alone,
// even one with a task it could promote; finished and unknown ids are
// ignored.
func TestATargetedPassAdvancesOnlyTheRunsNamed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(joinOfTwo)
	named, nts, na, nb := f.joinWithParentsRunning()
	other, ots, oa, ob := f.joinWithParentsRunning()
	for _, c := range []store.ClaimedTask{na, nb, oa, ob} {
		f.succeedUncounted(c)
	}
	res, err := f.s.AdvanceRuns(f.ctx, []uuid.UUID{named, uuid.New()}, "targeted")
	if err != nil || res.Runs != 1 || res.Promoted != 1 {
		t.Fatalf("AdvanceRuns(named, unknown) = %+v, %v; want one run locked, its join promoted", res, err)
	}
	f.wantState(nts["join"].ID, core.TaskReady)
	f.wantState(ots["join"].ID, core.TaskPending)
	if n := f.count(`SELECT count(*) FROM task_events WHERE run_id = $1 AND actor = 'targeted'`, other); n != 0 {
		t.Fatalf("the targeted pass wrote %d events in a run it was not given", n)
	}
}

// notification is one NOTIFY as a listener of several channels sees it.
type notification struct{ channel, payload string }

// listenAll LISTENs on the given channels through one connection, so that
// what arrives on each comes in one commit order.
func listenAll(t *testing.T, url string, channels ...string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, ch := range channels {
		if _, err := conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}

// nextOn returns the next notification conn receives.
func nextOn(t *testing.T, conn *pgx.Conn) notification {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return notification{n.Channel, n.Payload}
}

// TestEachWriterWakesOnlyTheListenersThatAct: mode 58. Through one
// connection LISTENing on the schedulers' and the publishers' channels, in
// commit order: the targeted pass that promotes a child wakes
// OutboxChannel only (schedulers are not woken by it); a finish names its
// run on TasksChannel, and wakes OutboxChannel only when it promoted a
// child (the counter join); a pass that writes no outbox row notifies
// nothing; a reap names the run reaped in on
// TasksChannel; a requeue names the requeued task's run; CancelRun names
// its run. Each transaction notifies once.
func TestEachWriterWakesOnlyTheListenersThatAct(t *testing.T) {
	// Not parallel: the package's tests share a database, whose
	// notifications every listener of a channel receives.
	f, url := notifyFixture(t)
	f.apply(`
name: chain2
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: noop, depends_on: [a], retry: {max_attempts: 1}}
`)
	run := f.trigger("chain2", "")
	ts := f.tasks(run)
	early := f.trigger("chain2", "")
	f.apply(twoRoots)
	pair := f.trigger("two", "")
	conn := listenAll(t, url, store.TasksChannel, store.OutboxChannel)
	want := func(step string, exp notification) {
		t.Helper()
		if got := nextOn(t, conn); got != exp {
			t.Fatalf("after %s: %+v; want %+v", step, got, exp)
		}
	}
	tasks := notification{store.TasksChannel, run.String()}

	// A parent whose success was not counted (an older binary's finish):
	// the pass that promotes its child wakes OutboxChannel only.
	f.runTaskUncounted(f.taskID(early, "a"))
	if res, err := f.s.AdvanceRuns(f.ctx, []uuid.UUID{early}, "sched"); err != nil || res.Promoted != 1 {
		t.Fatalf("AdvanceRuns: %+v %v", res, err)
	}
	want("the pass that promoted b", notification{store.OutboxChannel, ""})

	// A finish that promotes its child (the counter join) in a RUNNING
	// run (the trigger wrote it so) wakes the publishers only: nothing is
	// left for a scheduler's pass there; the pass after it promotes
	// nothing and so notifies nothing.
	a := f.claim(ts["a"].ID, "w1", time.Minute)
	f.succeed(a)
	want("the finish that promoted b", notification{store.OutboxChannel, ""})
	// A finish that leaves its run open with nothing promoted (the other
	// root still to run) names the run on TasksChannel only.
	f.succeed(f.claim(f.taskID(pair, "a"), "w1", time.Minute))
	want("a finish in a run left open", notification{store.TasksChannel, pair.String()})
	if res, err := f.s.AdvanceRuns(f.ctx, []uuid.UUID{run}, "sched"); err != nil || res.Promoted != 0 {
		t.Fatalf("AdvanceRuns after the finish: %+v %v", res, err)
	}

	b := f.claim(ts["b"].ID, "w1", time.Millisecond)
	f.waitLeaseExpired(b.ID)
	if n, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "reaper"); err != nil || n != 1 {
		t.Fatalf("reap: %d %v", n, err)
	}
	want("a reap (after a pass that promoted nothing, which notified nothing)", tasks)
	f.wantState(b.ID, core.TaskDead)
	if _, err := f.s.RequeueMany(f.ctx, []uuid.UUID{b.ID}, "cli:test", "again"); err != nil {
		t.Fatal(err)
	}
	want("a requeue", tasks)
	if _, err := f.s.CancelRun(f.ctx, run, "cli:test", "stop"); err != nil {
		t.Fatal(err)
	}
	want("a cancel", tasks)
}

// TestAWriteThatChangesManyRunsNamesThemAll: mode 59. A requeue of tasks
// in more runs than one TasksChannel payload holds names every run, in
// several payloads of at most 7900 bytes sent by its one NOTIFY statement.
func TestAWriteThatChangesManyRunsNamesThemAll(t *testing.T) {
	// Not parallel: the package's tests share a database, whose
	// notifications every listener of a channel receives.
	f, url := notifyFixture(t)
	f.apply(`
name: solo
tasks:
  - {name: a, handler: noop, retry: {max_attempts: 1}}
`)
	const n = 300 // about 1.4 payloads of run ids
	var runs, dead []uuid.UUID
	for range n {
		run := f.trigger("solo", "")
		id := f.taskID(run, "a")
		f.finish(f.claim(id, "w1", time.Minute), store.FinishRequest{Outcome: store.OutcomeFailed, Permanent: true, Error: "no"})
		runs, dead = append(runs, run), append(dead, id)
	}
	l := listenOn(t, url, store.TasksChannel)
	if _, err := f.s.RequeueMany(f.ctx, dead, "cli:test", "again"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < n {
		items := next(t, l)
		if slices.Contains(items, store.AnyRun) {
			t.Fatalf("a requeue of %d runs sent AnyRun; want the runs named", n)
		}
		got = append(got, items...)
	}
	want := make([]string, n)
	for i, r := range runs {
		want[i] = r.String()
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the notifications named %d runs, want the %d requeued (each once)", len(got), n)
	}
}
