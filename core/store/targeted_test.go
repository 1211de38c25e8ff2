package store_test

import (
	"context"
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

// advanceRunsInBackground starts a targeted pass over ids and returns where
// its result lands.
func (f *fixture) advanceRunsInBackground(ids ...uuid.UUID) <-chan store.AdvanceResult {
	out := make(chan store.AdvanceResult, 1)
	go func() {
		res, err := f.s.AdvanceRuns(f.ctx, ids, "targeted")
		if err != nil {
			f.t.Errorf("advance runs: %v", err)
		}
		out <- res
	}()
	return out
}

// waitBlockedOrDone waits until n sessions wait on a lock, failing the
// test when one of the passes returns first (it did not wait).
func (f *fixture) waitBlockedOrDone(n int, passes ...<-chan store.AdvanceResult) {
	f.t.Helper()
	f.waitUntil("the targeted passes to wait for the held run", func() bool {
		for _, p := range passes {
			select {
			case res := <-p:
				f.t.Fatalf("a targeted pass over a run another session holds returned without waiting: %+v", res)
			default:
			}
		}
		return f.blocked() >= n
	})
}

// joinWithParentsDone triggers a run of joinOfTwo, claims both parents,
// and returns the run, its tasks and the two claims.
func (f *fixture) joinWithParentsRunning() (uuid.UUID, map[string]store.TaskRun, store.ClaimedTask, store.ClaimedTask) {
	f.t.Helper()
	run := f.trigger("join2", "")
	ts := f.tasks(run)
	return run, ts, f.claim(ts["a"].ID, "w1", time.Minute), f.claim(ts["b"].ID, "w2", time.Minute)
}

// TestATargetedPassWaitsForARunAnotherPassHolds: mode 55. Another pass
// holds the run (it read the run's tasks before the parents finished: its
// promotion will not see them); both parents finish meanwhile and their
// notifications start a targeted pass over the run. That pass must wait
// for the run, not skip it as a full sweep does, and then promote the
// join: had it skipped, nothing would promote the join until a sweep.
func TestATargetedPassWaitsForARunAnotherPassHolds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(joinOfTwo)
	run, ts, a, b := f.joinWithParentsRunning()
	h := f.hold()
	f.exec(h, `SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE`, run)
	f.succeed(a)
	f.succeed(b)
	pass := f.advanceRunsInBackground(run)
	f.waitBlockedOrDone(1, pass)
	f.commit(h)
	res := <-pass
	if res.Runs != 1 || res.Promoted != 1 {
		t.Fatalf("the targeted pass after the holder let go: %+v; want the run locked and the join promoted", res)
	}
	f.wantState(ts["join"].ID, core.TaskReady)
	if n := f.outboxRows(ts["join"].ID); n != 1 {
		t.Fatalf("the join has %d outbox rows, want 1", n)
	}
}

// TestTwoTargetedPassesOverAJoinPromoteItOnce: modes 20 and 55. Both
// parents of a join finish together and each finish's notification starts
// a targeted pass (two schedulers, each woken by one finish) while a third
// session holds the run. Both passes wait; the join is promoted exactly
// once, with one dispatch, and never missed.
func TestTwoTargetedPassesOverAJoinPromoteItOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(joinOfTwo)
	run, ts, a, b := f.joinWithParentsRunning()
	h := f.hold()
	f.exec(h, `SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE`, run)
	together(2, func(i int) { f.succeed([]store.ClaimedTask{a, b}[i]) })
	first, second := f.advanceRunsInBackground(run), f.advanceRunsInBackground(run)
	f.waitBlockedOrDone(2, first, second)
	f.commit(h)
	r1, r2 := <-first, <-second
	if r1.Promoted+r2.Promoted != 1 {
		t.Fatalf("two targeted passes promoted %d and %d tasks, want the join once", r1.Promoted, r2.Promoted)
	}
	if n := f.outboxRows(ts["join"].ID); n != 1 {
		t.Fatalf("the join has %d outbox rows, want 1", n)
	}
	if ev := f.count(`SELECT count(*) FROM task_events WHERE task_run_id = $1 AND to_state = 'READY'`, ts["join"].ID); ev != 1 {
		t.Fatalf("the join was promoted %d times, want once", ev)
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
		f.succeed(c)
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
// commit order: a finish names its run on TasksChannel only (publishers
// are not woken by it); the targeted pass that promotes the child wakes
// OutboxChannel only (schedulers are not woken by it); a pass that writes
// no outbox row notifies nothing; a reap names the run reaped in on
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
	conn := listenAll(t, url, store.TasksChannel, store.OutboxChannel)
	want := func(step string, exp notification) {
		t.Helper()
		if got := nextOn(t, conn); got != exp {
			t.Fatalf("after %s: %+v; want %+v", step, got, exp)
		}
	}
	tasks := notification{store.TasksChannel, run.String()}

	a := f.claim(ts["a"].ID, "w1", time.Minute)
	f.succeed(a)
	want("a finish", tasks)
	if res, err := f.s.AdvanceRuns(f.ctx, []uuid.UUID{run}, "sched"); err != nil || res.Promoted != 1 {
		t.Fatalf("AdvanceRuns: %+v %v", res, err)
	}
	want("the pass that promoted b", notification{store.OutboxChannel, ""})
	if res, err := f.s.AdvanceRuns(f.ctx, []uuid.UUID{run}, "sched"); err != nil || res.Promoted != 0 {
		t.Fatalf("AdvanceRuns again: %+v %v", res, err)
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
